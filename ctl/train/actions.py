"""Loop actions: the user's own duties after each train loop, as Orbit's.

`ctl.run(..., loop_actions=[fn, ...])` calls each `fn(step, result)` after
every train loop, once the built-in duties of that loop are done (log line,
evaluation, checkpoint), in the order given. `result` is a `LoopResult`: the
loop's mean loss and accuracy and the metrics of the evaluation that ran
after it, if one did.

An action asks the run to stop by raising `StopTraining`: the run then
finishes as at `train_steps` (the checkpoint of the step, the export, the
summary, whose `stopped_early` says at which step and why) and returns
normally. The actions after it in the list are not called for that loop.

Actions run on every worker (the chief's result has `is_chief=True`): every
worker must take the same decision to stop, or the others wait for it in the
next loop's all-reduce. The loss, accuracy and evaluation metrics are reduced
over all workers, so a decision made from them alone is the same everywhere;
an action with a side effect of its own (a file) does it on the chief only.
A loop that ends in a stop request (SIGTERM) saves and stops without calling
the actions. The stop is not remembered: running the same call again
resumes at the saved step, and the actions decide anew.
"""

from collections.abc import Callable, Sequence
import dataclasses

from absl import logging


class StopTraining(Exception):  # noqa: N818 (a request, not an error)
  """Raised by a loop action to end the run cleanly at this step.

  The message says why; it goes into the run summary (`stopped_early`) and
  the run ledger (a `stopped_early` event).
  """


@dataclasses.dataclass(frozen=True)
class LoopResult:
  """What a loop action is told of the loop that just ended.

  Attributes:
    loss: the mean training loss of the loop's steps (global batch).
    accuracy: the training accuracy over the loop's examples; None when the
      run does not count it (`RunOptions.train_accuracy=False`).
    eval_metrics: the evaluation run after this loop ("loss", "accuracy",
      "examples"); empty when none ran.
    is_chief: whether this worker is the chief.
  """

  loss: float
  accuracy: float | None
  eval_metrics: dict
  is_chief: bool


Action = Callable[[int, LoopResult], None]


class LoopActions:
  """Calls the user's loop actions; remembers a request to stop."""

  def __init__(
    self,
    actions: Sequence[Action] = (),
    *,
    record: Callable[..., None] = lambda **_: None,
  ):
    """Initializes the duty.

    Args:
      actions: `fn(step, result)` callables, called in order.
      record: `record(step=..., reason=...)` of a stop (the run ledger's
        `stopped_early` event).
    """
    self._actions = tuple(actions)
    self._record = record
    self.stopped = None  # {"step": ..., "reason": ...} once one stopped.

  def after_loop(self, step: int, result: LoopResult) -> bool:
    """Calls every action with the loop that ended at `step`.

    Returns:
      True when an action raised `StopTraining`: the run ends at `step`.
    """
    for action in self._actions:
      try:
        action(step, result)
      except StopTraining as stop:
        self.stopped = {"step": step, "reason": str(stop)}
        logging.info("A loop action stopped the run at step %d: %s", step, stop)
        self._record(**self.stopped)
        return True
    return False

  def summary(self) -> dict:
    """{"stopped_early": {"step", "reason"}} after a stop; {} otherwise."""
    return {"stopped_early": self.stopped} if self.stopped else {}
