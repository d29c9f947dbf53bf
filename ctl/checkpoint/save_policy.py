"""When the controller saves a checkpoint: every N steps, every S seconds
(fixed, or "auto" from the run's own failure record: the Young/Daly interval
of its measured save cost and failure rate), and when a worker asked.

The controller asks two questions at loop boundaries only: `due_by_time`
before a train loop (the answer travels into the loop, so all workers agree
on it in the loop's all-reduce) and `due_after_loop` after it; it reports each
save with `saved`. Intervals are measured on `time.monotonic()`.
"""

from collections.abc import Callable
import time

from absl import logging

from ctl.telemetry import goodput
from ctl.telemetry import goodput_model


class SavePolicy:
  """The checkpoint schedule of one run."""

  def __init__(
    self,
    *,
    every_steps: int,
    every_secs: str | float,
    expected_mtbf_secs: float,
    train_steps: int,
    is_chief: bool,
    accounting: Callable[[], goodput.Accounting | None] = lambda: None,
  ):
    """Initializes the policy.

    Args:
      every_steps: save at each multiple of this step (0: never by steps).
      every_secs: seconds between saves (0: never by time), or "auto".
      expected_mtbf_secs: the failure interval "auto" assumes with no record.
      train_steps: the last step (its save belongs to the finishing steps).
      is_chief: only the chief's clock decides a save by time.
      accounting: the run's goodput record so far, for "auto".
    """
    self._every_steps = every_steps
    self._every = every_secs
    self._mtbf = expected_mtbf_secs
    self._train_steps = train_steps
    self._is_chief = is_chief
    self._accounting = accounting
    self.last_step = None
    self._last_time = time.monotonic()
    self.seconds, self.why = None, None

  def saved(self, step: int) -> None:
    """Records a save at `step` now, and chooses the next time interval."""
    self.last_step = step
    self._last_time = time.monotonic()
    self._choose_interval()

  def restored(self, step: int) -> None:
    """Records that the run holds the checkpoint of `step` already."""
    self.last_step = step

  def due_by_time(self) -> bool:
    """Whether the time interval has passed (the chief decides)."""
    return bool(
      self._is_chief
      and self.seconds is not None
      and time.monotonic() - self._last_time >= self.seconds
    )

  def due_after_loop(self, step: int, *, requested: bool) -> bool:
    """Whether to save after a loop that ended at `step`.

    Args:
      step: the step the loop reached.
      requested: the loop's agreed answer to `due_by_time`.
    """
    by_steps = self._every_steps and step % self._every_steps == 0
    return bool((by_steps or requested) and not self.is_final(step))

  def is_final(self, step: int) -> bool:
    """Whether `step` is the run's last (saved by the finishing steps)."""
    return step >= self._train_steps

  def summary(self) -> dict:
    """The "auto" interval and why, for the run summary; {} otherwise."""
    if not self.why:
      return {}
    return {"checkpoint_every_secs": {"seconds": self.seconds, "why": self.why}}

  def _choose_interval(self) -> None:
    if self._every != "auto":
      self.seconds = float(self._every) or None
      return
    seconds, why = checkpoint_interval(
      self._accounting(), expected_mtbf_secs=self._mtbf
    )
    previous = self.seconds
    if previous is None or abs(seconds - previous) > 0.1 * previous:
      logging.info(
        "checkpoint_every_secs=auto: every %.0f s: %s.", seconds, why
      )
    self.seconds, self.why = seconds, why

  def start(self) -> None:
    """Chooses the first time interval (after the restore)."""
    self._choose_interval()


def checkpoint_interval(
  accounting: goodput.Accounting | None, *, expected_mtbf_secs: float
) -> tuple[float, str]:
  """The `checkpoint_every_secs=auto` interval from what the ledger saw.

  Args:
    accounting: the job so far (None when there is no ledger).
    expected_mtbf_secs: the mean time between failures to assume while the
      ledger has seen none.

  Returns:
    (seconds, why): 0.0 while no save has been measured (save at the next
    loop boundary, to measure one), else the Young/Daly interval.
  """
  if accounting is None or not accounting.checkpoint_saves:
    return 0.0, (
      "no checkpoint save measured yet: saving at the next loop to measure one"
    )
  save = (
    accounting.seconds[goodput.CHECKPOINT_SAVE]
    + accounting.seconds[goodput.CHECKPOINT_UPLOAD]
  ) / accounting.checkpoint_saves
  if accounting.failures:
    mtbf = accounting.total_seconds / accounting.failures
    seen = (
      f"MTBF {mtbf:.0f} s ({accounting.failures} failure(s) in "
      f"{accounting.total_seconds:.0f} s)"
    )
  else:
    mtbf = expected_mtbf_secs
    seen = f"MTBF {mtbf:.0f} s (--expected_mtbf_secs; no failure seen yet)"
  interval = goodput_model.young_daly_interval(
    save_seconds=save, mtbf_seconds=mtbf
  )
  return interval, (
    f"sqrt(2 x {save:.2f} s per save x {seen}) = {interval:.0f} s"
  )
