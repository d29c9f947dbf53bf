"""Checkpoints in tiers: every worker's local tier, its peers', the bucket
behind them.

`TieredCheckpointer` has the `Checkpointer`'s interface (restore, save,
sync, close) for a run whose local tier is on (ctl.checkpoint.tiers.local_tier): every save
is a local save on every worker (its own node's copy, also on the workers
that used to throw theirs away); a save that is due for the bucket is then
copied from the chief's committed local checkpoint into the checkpoint
directory on a background thread, state file last. A restore agrees with
the other workers on the newest step any of them, or the bucket, holds
(ctl.checkpoint.tiers.tier_restore).

Local writes are asynchronous (TensorFlow's async checkpoint): the step
waits only while the variables are snapshotted on the host (on a CPU, the
snapshot shares the buffers, and the next update copies them on write), and
a commit thread waits for the files and commits the step in the tier's state
file. A worker killed before the commit restores the step before it, as for
a write cut short. The next save, a restore and the end wait for the commit.
A save the chief copies to the bucket waits for its own write instead (one
every bucket interval), then starts the copy on a thread: a write that
failed is then known while the variables still hold its step, which the
bucket saves instead, so the bucket's cadence loses nothing.

A write that failed is never committed (`checkpointing.wait_for_write`
raises its error, which TensorFlow's own sync keeps), and a local tier that
cannot be written (full, gone) is turned off with one warning line: the run
goes on with bucket saves, as without the tier.
"""

from collections.abc import Callable
import contextlib
import functools
import shutil
import threading

from absl import logging
import tensorflow as tf

from ctl.checkpoint import checkpointing
from ctl.checkpoint.tiers import bucket_tier
from ctl.checkpoint.tiers import local_tier
from ctl.checkpoint.tiers import node_tiers
from ctl.checkpoint.tiers import tier_restore
from ctl.distributed import worker_exchange
from ctl.errors import write_failure
from ctl.io import fencing


class TieredCheckpointer:
  """A `Checkpointer` with a local tier in front of the bucket."""

  def __init__(
    self,
    *,
    bucket: checkpointing.Checkpointer,
    tier: local_tier.LocalTier | None,
    keep: int,
    is_chief: bool,
    on_saved: Callable[[], None],
    agreement: Callable[..., tier_restore.Restored | None] | None,
    waiting: Callable[
      [], contextlib.AbstractContextManager
    ] = contextlib.nullcontext,
    fence: fencing.Fence = fencing.OPEN,
  ):
    """Initializes the checkpointer.

    Args:
      bucket: the checkpointer of the checkpoint directory (its restore is
        the fallback; its saves serve when the tier is off).
      tier: this worker's local tier; None when it could not be made (it
        still takes part in the agreement, which every worker makes).
      keep: how many checkpoints the bucket keeps.
      is_chief: whether this worker copies its saves to the bucket.
      on_saved: called (chief, copy thread) once a copy is in the bucket's
        directory (e.g. to upload it).
      agreement: `agreement(tier=..., bucket_dir=..., restore=...)`, the
        tiered restore with the cluster bound in (`tier_restore`); None
        when tiers are off (the bucket's own restore).
      waiting: a context the wait for an unfinished copy runs in (the
        `checkpoint_upload` phase: a copy that hangs is a stall there).
      fence: the chief's lease fence (ctl.io.fencing), checked by each copy
        to the bucket before its files and at its commit.
    """
    self._bucket = bucket
    self._tier = tier
    self._keep = keep
    self._is_chief = is_chief
    self._on_saved = on_saved
    self._agreement = agreement
    self._waiting = waiting
    self._fence = fence
    self._copy = None  # The running copy to the bucket: (thread, errors).
    self._committing = None  # The running commit: (thread, errors).
    self._async = tf.train.CheckpointOptions(enable_async=True)
    if tier:
      checkpointing.prepare_async_checkpoints()
    self.restored = None  # The last tier_restore.Restored.

  @property
  def directory(self) -> str:
    return self._bucket.directory

  @property
  def data_order_differs_from_step(self) -> int | None:
    return self._bucket.data_order_differs_from_step

  def restore_latest(self) -> str | None:
    """Restores the agreed newest step (every worker alike); the path."""
    self.sync()
    if self._agreement:
      self.restored = self._agreement(
        tier=self._tier,
        bucket_dir=self.directory,
        restore=self._bucket.restore,
      )
      if self.restored:
        if self.restored.tier == "bucket":
          self._bucket.mend_state(self.restored.path)
        return self.restored.path
    return self._bucket.restore_latest()

  def save(self, step: int, *, to_bucket: bool = True) -> str | None:
    """Saves `step` locally; when `to_bucket`, the chief copies it there.

    With the tier off (it could not be written), a save `to_bucket` goes to
    the bucket directly and a local-only save is skipped: the bucket keeps
    its own cadence, and only the fenced saves write it.

    Returns:
      The checkpoint's path; None when nothing was saved.

    Raises:
      CannotWrite: the tier is off and the bucket refused the files.
    """
    copy = to_bucket and self._is_chief
    self._end_commit()
    # One copy at a time: a save due for the bucket waits for the last one
    # (in the checkpoint_upload phase: a hung bucket is a stall there).
    self._end_copy(wait=copy)
    if not self._tier:
      return self._bucket.save(step) if to_bucket else None
    try:
      path = self._tier.write(
        self._bucket.checkpoint, step, options=self._async
      )
      if copy:  # Its write failed: the state is still `step`'s (below).
        self._adopt(step)
    except (OSError, tf.errors.OpError) as e:
      self._turn_off(e)
      return self._bucket.save(step) if to_bucket else None
    if copy:
      self._start_copy(step)
      logging.info("Saved checkpoint %s (local tier).", path)
      return path
    errors = []
    thread = threading.Thread(
      target=self._commit, args=(step, errors), name=f"tier-commit-{step}"
    )
    thread.start()
    self._committing = (thread, errors)
    logging.info("Saved checkpoint %s (local tier, writing).", path)
    return path

  def _adopt(self, step: int) -> None:
    """Waits for the files of `step` and commits them.

    Raises:
      OSError, tf.errors.OpError: they could not be written.
    """
    checkpointing.wait_for_write(self._bucket.checkpoint)
    self._tier.adopt(step)

  def _commit(self, step: int, errors: list) -> None:
    """The commit thread of a save the bucket does not wait for."""
    try:
      self._adopt(step)
    except (OSError, tf.errors.OpError) as e:
      errors.append(e)

  def _end_commit(self) -> None:
    """Waits for the running commit; a tier it could not write is turned
    off (its step was not committed)."""
    if self._committing is None:
      return
    thread, errors = self._committing
    thread.join()
    self._committing = None
    if errors:
      self._turn_off(errors[0])

  def _turn_off(self, error: Exception) -> None:
    logging.warning(
      "The local checkpoint tier %s cannot be written (%s); it is turned "
      "off and checkpoints go to the bucket only.",
      self._tier.directory,
      error,
    )
    self._tier = None

  def _start_copy(self, step: int) -> None:
    """Copies committed `step` to the bucket on a thread (the last copy
    has ended: `save`)."""
    snapshot = self._tier.snapshot(step)
    errors = []

    def copy():
      try:
        bucket_tier.copy_to_bucket(
          snapshot,
          step=step,
          bucket_dir=self.directory,
          keep=self._keep,
          fence=self._fence,
        )
        self._on_saved()
      except Exception as e:  # pylint: disable=broad-except
        what = f"the checkpoint of step {step}"
        errors.append(write_failure(what, self.directory, e) or e)
      finally:
        shutil.rmtree(snapshot, ignore_errors=True)

    thread = threading.Thread(target=copy, name=f"bucket-copy-{step}")
    thread.start()
    self._copy = (thread, errors)

  def sync(self) -> None:
    """Waits for the last local save's commit and copy to the bucket.

    Raises:
      CannotWrite: the bucket refused the copy (once; other errors of the
        copy as they were).
    """
    self._end_commit()
    self._bucket.sync()
    self._end_copy(wait=True)

  def _end_copy(self, *, wait: bool) -> None:
    """Ends a finished copy to the bucket (with `wait`, once it finishes);
    raises its error."""
    if self._copy is None:
      return
    thread, errors = self._copy
    if wait and thread.is_alive():
      with self._waiting():
        thread.join()
    if not thread.is_alive():
      self._copy = None
      if errors:
        raise errors[0]

  def close(self) -> None:
    """Waits for the local tier's commit and the copy to the bucket."""
    try:
      self.sync()
    finally:
      self._bucket.close()

  def remove_tier(self) -> None:
    """Removes this worker's local tier (the run has ended)."""
    if self._tier:
      self._tier.remove()


def build(
  *,
  bucket: checkpointing.Checkpointer,
  bucket_url: str,
  strategy: tf.distribute.Strategy,
  setting: str,
  job_id: str,
  keep: int,
  is_chief: bool,
  on_saved: Callable[[], None],
  need_bytes: int,
  waiting: Callable[
    [], contextlib.AbstractContextManager
  ] = contextlib.nullcontext,
  fence: fencing.Fence = fencing.OPEN,
  lease_place: dict | None = None,
) -> TieredCheckpointer:
  """The run's checkpointer for `--local_checkpoints=setting`.

  Args:
    bucket: the checkpointer of the checkpoint directory.
    bucket_url: that directory as the user gave it (a node agent persists
      into it directly: a local, FUSE or gs:// path TensorFlow can write).
    strategy: the strategy the workers agree through.
    setting: see `node_tiers.choose_root`; "off": the bucket alone.
    job_id: the job's id (the tier is private to it).
    keep: how many checkpoints the bucket keeps.
    is_chief: whether this worker copies saves to the bucket.
    on_saved: called once a copy is in the bucket's directory.
    need_bytes: the size of one checkpoint.
    waiting: the context of a wait for an unfinished copy to the bucket.
    fence: the chief's lease fence, checked by its copies to the bucket.
    lease_place: the run directory's lease, for a node agent's fence
      (`node_tiers.open_tier`).
  """
  if setting == "off":
    tier, agreement = None, None
  else:
    tier = node_tiers.open_tier(
      setting,
      job_id=job_id,
      checkpoint_dir=bucket_url,
      rank=worker_exchange.worker_index(strategy),
      need_bytes=need_bytes,
      keep_in_bucket=keep,
      lease_place=lease_place,
    )
    _bind(tier, bucket_url, strategy=strategy, is_chief=is_chief)
    agreement = _agreement(strategy)
  return TieredCheckpointer(
    bucket=bucket,
    tier=tier,
    keep=keep,
    is_chief=is_chief,
    on_saved=on_saved,
    agreement=agreement,
    waiting=waiting,
    fence=fence,
  )


def _agreement(strategy: tf.distribute.Strategy) -> Callable[..., object]:
  """The tiered restore (`tier_restore.restore_agreed`), the cluster of
  `strategy` bound in."""
  return functools.partial(
    tier_restore.restore_agreed,
    hosts=worker_exchange.worker_hosts(strategy),
    service_port=node_tiers.service_port(),
    gather=lambda row: worker_exchange.gather_rows(strategy, row),
  )


def _bind(tier, bucket_url: str, *, strategy, is_chief: bool) -> None:
  """Binds `tier` (None: none, yet this worker takes part) to the run of
  the checkpoint directory (`LocalTier.bind`). Its id is the same on every
  worker: the chief reads it (`bucket_tier.run_id`) and sends it to the others, which
  need not reach the directory for it (one exchange)."""
  own = bucket_tier.run_id(bucket_url) if is_chief else 0
  run = int(worker_exchange.gather_rows(strategy, [own])[:, 0].max())
  if tier:
    tier.bind(run)
