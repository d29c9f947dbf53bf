"""The controller's checkpoint duty: restore at start-up, save when due.

Joins the `Checkpointer` (what a checkpoint holds, where it goes) and the
`SavePolicy` (when) to the run's progress marks: each save is a
`checkpoint_save` phase and each upload of a mirrored directory a
`checkpoint_upload` phase, and the global step is read back after a restore.
"""

from collections.abc import Callable

from absl import logging
import tensorflow as tf

from ctl.checkpoint import checkpointing
from ctl.checkpoint import save_policy
from ctl.io import fencing
from ctl.io import storage
from ctl.telemetry import progress as progress_lib


class RunCheckpoints:
  """Restores and saves one run's checkpoints."""

  def __init__(
    self,
    *,
    checkpointer: checkpointing.Checkpointer,
    policy: save_policy.SavePolicy,
    progress: progress_lib.Progress,
    global_step: tf.Variable,
    restores: tf.Variable,
    fence: fencing.Fence = fencing.OPEN,
    local_every_steps: int = 0,
    record: Callable[..., None] = lambda **_: None,
  ):
    """Initializes the duty.

    Args:
      checkpointer: writes and reads the checkpoints.
      policy: when to save; told of every save and restore.
      progress: marks each save.
      global_step: the step variable a restore sets.
      restores: counts restores (checkpointed, reported in the summary).
      fence: the chief's lease fence (ctl.io.fencing), checked before a save.
      local_every_steps: the local tier's save interval (0: no local tier).
      record: `record(**fields)` of each tiered restore (the run ledger's
        `checkpoint_restore` event).
    """
    self._checkpointer = checkpointer
    self.policy = policy
    self._progress = progress
    self._global_step = global_step
    self._restores = restores
    self._fence = fence
    self._local_every = local_every_steps
    self._record = record

  @property
  def data_order_differs_from_step(self) -> int | None:
    """The first step trained in another data order than an uninterrupted
    run's (a resume with another global batch size), or None."""
    return self._checkpointer.data_order_differs_from_step

  def restore_latest(self) -> tuple[str | None, int]:
    """Restores the newest readable checkpoint: (its path or None, step)."""
    path = self._checkpointer.restore_latest()
    restored = getattr(self._checkpointer, "restored", None)
    if path and restored:
      self._record(
        step=restored.step,
        tier=restored.tier,
        tiers=list(restored.tiers),
        seconds=round(restored.seconds, 3),
      )
    return path, int(self._global_step.numpy())

  def restore_at_start(
    self, *, directory: str, train_steps: int
  ) -> tuple[bool, int]:
    """The restore of start-up: (whether a checkpoint was restored, step).

    Args:
      directory: the checkpoint directory (for the log line).
      train_steps: the run's target step (0: a missing checkpoint is not
        worth a line, nothing will be trained).
    """
    path, step = self.restore_latest()
    if path is None:
      if train_steps:
        logging.info("No checkpoint in %s; starting at step 0.", directory)
      return False, step
    self._restores.assign_add(1)
    self.policy.restored(step)
    logging.info("Restored step %d from %s.", step, path)
    if step >= train_steps:
      logging.info(
        "Step %d reaches --train_steps=%d: nothing to train.", step, train_steps
      )
    return True, step

  def save(self, step: int) -> None:
    """Saves the checkpoint of `step` (every worker takes part).

    Raises:
      LeaseLost: another trainer took the lease; nothing was written.
    """
    self._fence.check(f"the checkpoint of step {step}")
    with self._progress.phase(progress_lib.CHECKPOINT_SAVE):
      self._checkpointer.save(step)
    self.policy.saved(step)

  def start(self) -> None:
    """Starts the save schedule (after the restore of start-up)."""
    self.policy.start()

  def due_by_time(self) -> bool:
    """Whether a save by time is due: the chief's answer, asked before a
    loop, which the loop makes every worker's (`maybe_save`'s `requested`)."""
    return self.policy.due_by_time()

  def maybe_save(self, step: int, *, requested: bool) -> bool:
    """Saves after a loop that ended at `step`, when the policy says.

    Args:
      step: the step the loop reached.
      requested: the loop's agreed answer to `due_by_time`.

    Returns:
      Whether the checkpoint of `step` was saved (never the last step's,
      which belongs to `save_final`).
    """
    if not self.policy.due_after_loop(step, requested=requested):
      if self.local_due(step):
        self.save_local(step)
      return False
    self.save(step)
    return True

  def save_final(self, step: int) -> bool:
    """Saves `step` at the end of a run unless it is saved already.

    Returns:
      Whether it saved.
    """
    if self.policy.last_step == step:
      return False
    self.save(step)
    return True

  def summary(self) -> dict:
    """The save schedule's part of the run summary (`SavePolicy.summary`)."""
    return self.policy.summary()

  def local_due(self, step: int) -> bool:
    """Whether a loop that ended at `step` saves to the local tier (not the
    last step: the final save, to both tiers, follows it)."""
    return (
      bool(self._local_every)
      and step % self._local_every == 0
      and not self.policy.is_final(step)
    )

  def save_local(self, step: int) -> None:
    """Saves `step` to the local tier only (every worker takes part)."""
    with self._progress.phase(progress_lib.LOCAL_CHECKPOINT_SAVE):
      self._checkpointer.save(step, to_bucket=False)

  def close(self) -> None:
    """Waits for an asynchronous save, uploads what is left."""
    self._checkpointer.close()

  def remove_local(self) -> None:
    """Removes this worker's local tier (the run has ended)."""
    self._checkpointer.remove_tier()


def upload(location: storage.Location, progress: progress_lib.Progress):
  """Publishes a mirrored checkpoint directory, as a `checkpoint_upload`."""
  if not location.mirrored:
    return
  with progress.phase(progress_lib.CHECKPOINT_UPLOAD):
    location.publish(commit_file="checkpoint")
