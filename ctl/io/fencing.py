"""The fence every commit point checks: this process still holds the lease.

A chief that was paused past its lease's staleness (a suspended VM, a long
GC pause, SIGSTOP) or taken over with `--take_over_lease` may go on running
after another trainer took the run directory (ctl.resilience.lease). Such a writer must
never commit again, so everything that commits to the run directory (the
checkpoint save and its state file, the export swap, the run summary, the
ledger, TensorBoard summaries, a Cloud Storage upload) first calls
`fence.check(what)`, which raises `LeaseLost` once the lease is lost.

The lease's fence (`ctl.resilience.lease.Lease.fence()`) checks the renewal thread's
finding and a fresh read of the lease record (its holder and generation, the
fencing token); commits are rare, so one small read each costs little. On
gs:// the checkpoint state file is also uploaded with the object generation
precondition (ctl.io.mirror), so a writer that passed its check just before
being taken over still cannot overwrite it.

This module holds the fence that always passes (`OPEN`): a worker that is not
the chief, or a caller that holds no lease (a test, a tool).
"""

from ctl.errors import LeaseLost

__all__ = ["OPEN", "Fence", "LeaseLost"]


class Fence:
  """A fence that always passes; `ctl.resilience.lease` makes the ones that do not."""

  def check(self, what: str) -> None:
    """Returns if this process may still commit `what`.

    Args:
      what: what is about to be committed ("the checkpoint of step 40"),
        named in the sentence of a lost lease.

    Raises:
      LeaseLost: another trainer took the run directory's lease.
    """
    del what


OPEN = Fence()
