"""Loop actions: the user's own duties after each train loop, as Orbit's.

`ctl.run(..., loop_actions=[fn, ...])` calls each `fn(step, result)` after
every train loop, once the loop's log line and evaluation are done and
before its checkpoint, in the order given. `result` is a `LoopResult`: the
loop's training metrics by name and those of the evaluation that ran after
it, if one did.

State that survives a restart: an action that is a `tf.Module` holding
variables (a patience counter, the best value so far) has them saved in
every checkpoint and restored with it. Since the checkpoint of a step is
saved after the actions of that step, it holds what they decided and what
they changed (a learning rate they cut), so a resumed run decides as the
uninterrupted run did. `EarlyStopping` below is such an action.

An action asks the run to stop by raising `StopTraining`: the run then
finishes as at `train_steps` (the checkpoint of the step, the export, the
summary, whose `stopped_early` says at which step and why) and returns
normally. The actions after it in the list are not called for that loop.

Actions run on every worker (the chief's result has `is_chief=True`). The
run ends at the step an action stopped at, on one worker or several: with
several, a stop decided on one worker only (the chief's file, its clock)
must still end every worker at that step, so right after the actions (and
an evaluation's callbacks) the workers all-reduce one flag, "did an action
of yours stop?", and all end where any did (a run with neither pays no
exchange). The metrics are reduced over all workers, so a decision made
from them alone is the same everywhere; an action with a side effect of its
own (a file) does it on the chief only. A loop that ends in a
stop request (SIGTERM) saves and stops without calling the actions. The stop
is not remembered: running the same call again resumes at the saved step,
and the actions decide anew (from their restored state). An evaluation
callback that raises `StopTraining` stops the run as an action does.
"""

from collections.abc import Callable, Sequence
import dataclasses

from absl import logging
import tensorflow as tf

from ctl.errors import UserError


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
    metrics: the loop's training metrics by name, reduced over all
      replicas and workers: "loss" and each of the task's metrics (those
      only while the run updates them, `RunOptions.train_metrics`).
    eval_metrics: the evaluation run after this loop ("loss", each metric,
      "examples"); empty when none ran.
    is_chief: whether this worker is the chief.
  """

  loss: float
  metrics: dict
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
    self.requested = None  # Why an action stopped, until the run ends.
    self.stopped = None  # {"step": ..., "reason": ...} once the run ended.

  def __bool__(self) -> bool:
    return bool(self._actions)

  def stateful(self) -> list[tf.Module]:
    """The actions whose state goes into every checkpoint: those that are a
    `tf.Module` holding variables (ctl.train.actions.EarlyStopping, ...),
    the shipped ones' variables made now (`_BestSoFar.build`)."""
    for action in self._actions:
      if isinstance(action, _BestSoFar):
        action.build()
    return [
      action
      for action in self._actions
      if isinstance(action, tf.Module) and action.variables
    ]

  def check(self, evaluated: Sequence[str] | None) -> None:
    """Refuses, before the first step, an action that watches what the run
    never reports: a misspelt metric, or any evaluation metric in a run
    without evaluation, would otherwise be looked up in vain at every loop
    and the action would never act.

    Args:
      evaluated: the names each evaluation reports ("loss" and the task's
        metrics); None when the run does not evaluate.

    Raises:
      UserError: one sentence naming the action and what the run reports.
    """
    for action in self._actions:
      if isinstance(action, _BestSoFar):
        action.check(evaluated)

  def after_loop(self, step: int, result: LoopResult) -> bool:
    """Calls every action with the loop that ended at `step`.

    Returns:
      True when an action raised `StopTraining` (`request`).
    """
    for action in self._actions:
      try:
        action(step, result)
      except StopTraining as stop:
        self.request(step, stop)
        return True
    return False

  def request(self, step: int, stop: StopTraining) -> None:
    """Remembers that `stop` was raised after the loop that ended at `step`
    (by an action or an evaluation callback) until the run ends (`end`)."""
    logging.info(
      "A loop action asked to stop the run at step %d: %s", step, stop
    )
    self.requested = str(stop)

  def end(self, step: int) -> None:
    """The run ends at `step` on a stop, this worker's or another's."""
    reason = self.requested or "a loop action of another worker stopped it"
    self.stopped = {"step": step, "reason": reason}
    logging.info("A loop action stopped the run at step %d: %s", step, reason)
    self._record(**self.stopped)

  def summary(self) -> dict:
    """{"stopped_early": {"step", "reason"}} after a stop; {} otherwise."""
    return {"stopped_early": self.stopped} if self.stopped else {}


class _BestSoFar(tf.Module):
  """The best value of an evaluation metric so far and its step, as
  variables (saved in every checkpoint, restored with it).

  The variables are made by the run (`build`), not by the constructor: an
  action made before `ctl.environment()` must not start TensorFlow's
  runtime, which `MultiWorkerMirroredStrategy` must configure first.
  """

  def __init__(self, *, name: str, metric: str, mode: str):
    super().__init__(name=name)
    if mode not in ("min", "max"):
      raise ValueError(f"mode must be min or max, got {mode!r}.")
    self._metric = metric
    self._sign = 1.0 if mode == "min" else -1.0

  def build(self) -> None:
    """Makes the variables (once): the best, its step, and the subclass's
    (`_more_variables`)."""
    if "best" not in self.__dict__:
      self.best = tf.Variable(float("inf"), dtype=tf.float64, trainable=False)
      self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False)
      self._more_variables()

  def _more_variables(self) -> None:
    """Makes a subclass's own variables."""

  def check(self, evaluated: Sequence[str] | None) -> None:
    """Raises UserError unless the run's evaluation reports this metric
    (`evaluated`, as `_evaluated` looks it up; None: no evaluation)."""
    action = f"ctl.{type(self).__name__}(metric={self._metric!r})"
    if evaluated is None:
      raise UserError(
        f"{action} watches an evaluation metric, but the run has no "
        "evaluation (Task.eval_dataset_fn is None)."
      )
    if self._metric not in evaluated:
      raise UserError(
        f"{action} names no metric of the run's evaluation, whose metrics "
        f"are {', '.join(evaluated)}."
      )

  def _evaluated(self, result: LoopResult) -> float | None:
    """The metric of the evaluation after this loop, or None (none ran)."""
    return result.eval_metrics.get(self._metric)

  def _improves(self, value: float, step: int, min_delta: float) -> bool:
    """Whether `value` beats the best by more than `min_delta`; it is then
    the best, of `step`."""
    if self._sign * value >= float(self.best.numpy()) - min_delta:
      return False
    self.best.assign(self._sign * value)
    self.best_step.assign(step)
    return True

  def _describe_best(self) -> str:
    best = self._sign * float(self.best.numpy())
    return f"validation {self._metric} {best:.4f} at step {int(self.best_step.numpy())}"


class EarlyStopping(_BestSoFar):
  """A loop action that stops when an evaluation metric stops improving.

  Its best value and patience counter are variables, saved in every
  checkpoint: a run killed after the counter advanced resumes with it and
  stops at the step the uninterrupted run stops at. It decides from the
  evaluation's reduced metrics, so every worker stops at the same step.
  """

  def __init__(
    self,
    *,
    metric: str = "loss",
    mode: str = "min",
    patience: int,
    min_delta: float = 0.0,
  ):
    """Initializes the rule.

    Args:
      metric: the evaluation metric to watch ("loss" or a task metric).
      mode: "min" (lower is better) or "max".
      patience: how many evaluations in a row may fail to improve the best.
      min_delta: how much better than the best counts as an improvement.

    Raises:
      ValueError: a bad mode or patience.
    """
    super().__init__(name="early_stopping", metric=metric, mode=mode)
    if patience < 1:
      raise ValueError(f"patience must be >= 1, got {patience}.")
    self._patience, self._min_delta = patience, min_delta

  def _more_variables(self) -> None:
    self.waited = tf.Variable(0, dtype=tf.int64, trainable=False)

  def __call__(self, step: int, result: LoopResult) -> None:
    value = self._evaluated(result)
    if value is None:
      return
    if self._improves(value, step, self._min_delta):
      self.waited.assign(0)
      return
    self.waited.assign_add(1)
    if int(self.waited.numpy()) >= self._patience:
      raise StopTraining(
        f"{self._describe_best()} not improved in {self._patience} evaluations"
      )


class KeepBest(_BestSoFar):
  """A loop action that keeps the SavedModel of the best evaluation beside
  the newest, as Orbit's `NewBestMetric` with an export action.

  When an evaluation beats the best so far, the model is exported (every
  worker takes part; the chief commits, fenced and atomic, as the final
  export) into `<model_dir>/best_saved_model`, whose marker names the step,
  with the run's checkpoint of that step inside it (`checkpoint/ckpt`).
  The best value is a variable in every checkpoint, so after kills the kept
  export is the one the uninterrupted run keeps.
  """

  def __init__(self, *, metric: str = "loss", mode: str = "min"):
    """Initializes the action.

    Args:
      metric: the evaluation metric ("loss" or a task metric).
      mode: "min" (lower is better) or "max".
    """
    super().__init__(name="keep_best", metric=metric, mode=mode)
    self._keep = None

  def bind(self, keep: Callable[[int], None]) -> None:
    """Called by the run before training: `keep(step)` exports the model
    as it is at `step` into the run's best export."""
    self._keep = keep

  def __call__(self, step: int, result: LoopResult) -> None:
    value = self._evaluated(result)
    if value is not None and self._improves(value, step, 0.0):
      logging.info("New best %s; exporting it.", self._describe_best())
      self._keep(step)
