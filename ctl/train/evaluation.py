"""Evaluation during a run: when, the eval loop, and where its metrics go.

The controller asks `due(step)` after each train loop and calls `run(step)`
(also once more at the end of the run). A run evaluates on the workers that
train (every worker takes part in the distributed eval loop); the chief's
writer records the validation scalars unless a side-car evaluator
(`ctl.train.evaluator`) writes them; each callback sees every evaluation.
"""

from collections.abc import Callable, Sequence

from absl import logging
import tensorflow as tf

from ctl.telemetry import progress as progress_lib
from ctl.telemetry import summaries
from ctl.train import loop as loop_lib
from ctl.train import metrics_window


class Evaluation:
  """Evaluates the model every `every_steps` and at the end."""

  def __init__(
    self,
    *,
    eval_loop: loop_lib.EvalLoop,
    eval_data: tf.distribute.DistributedDataset | None,
    every_steps: int,
    train_steps: int,
    writer: summaries.ScalarWriter | None,
    callbacks: Sequence[Callable[[int, dict], None]] = (),
    progress: progress_lib.Progress,
    publish: Callable[[], None] = lambda: None,
    record: Callable[..., None] = lambda **_: None,
  ):
    """Initializes the evaluation.

    Args:
      eval_loop: the compiled eval loop.
      eval_data: the distributed eval dataset; None: never evaluate.
      every_steps: evaluate at each multiple of this step (0: only at the end).
      train_steps: the last step (the end evaluates it).
      writer: where validation scalars go; None when an evaluator writes them.
      callbacks: called as `fn(step, metrics)` after each evaluation.
      progress: marks the evaluation phase.
      publish: makes what the writer wrote visible (a mirrored directory).
      record: `record(step=..., metrics=...)` of each evaluation (the run
        ledger's `evaluated` event, which ctl-report shows).
    """
    self._eval_loop = eval_loop
    self._eval_data = eval_data
    self._every_steps = every_steps
    self._train_steps = train_steps
    self._writer = writer
    self._callbacks = tuple(callbacks)
    self._progress = progress
    self._publish = publish
    self._record = record
    self.metrics = {}  # The latest evaluation's.
    self.step = None  # The step `metrics` are of.

  @property
  def has_callbacks(self) -> bool:
    """Whether a callback may ask to stop after an evaluation."""
    return bool(self._callbacks)

  def due(self, step: int) -> bool:
    """Whether to evaluate after a train loop that ended at `step`."""
    return bool(
      self._every_steps
      and step % self._every_steps == 0
      and step < self._train_steps
    )

  def run(self, step: int) -> None:
    """Evaluates at `step` (nothing when there is no eval data)."""
    if self._eval_data is None:
      return
    with self._progress.phase(progress_lib.EVALUATION):
      metrics = self._eval_loop.evaluate(self._eval_data)
    if not record(
      step,
      metrics,
      name="eval",
      writer=self._writer,
      run=summaries.VALIDATION,
      publish=self._publish,
    ):
      return
    self.metrics, self.step = metrics, step
    self._record(step=step, metrics=metrics)
    for callback in self._callbacks:
      callback(step, metrics)


def record(
  step: int,
  metrics: dict,
  *,
  name: str,
  writer: summaries.ScalarWriter | None,
  run: str,
  publish: Callable[[], None],
) -> bool:
  """Logs one evaluation and writes its loss and metrics.

  An evaluation that saw no examples has no metrics: it is warned of once,
  and nothing is written (a loss of 0 would read as a perfect model).

  Args:
    step: the step evaluated.
    metrics: what the eval loop returned (`examples`, `loss`, and each of
      the task's metrics by name).
    name: what the log lines call the evaluation ("eval" in a run, with a
      prefix in the side-car evaluator).
    writer: where the scalars go; None: nowhere (an evaluator writes them).
    run: the writer's run directory for them ("" for its own logdir).
    publish: makes what the writer wrote visible (a mirrored directory).

  Returns:
    Whether it was an evaluation (False: no examples).
  """
  if not metrics["examples"]:
    logging.warning(
      "%s at step %d: the validation data holds no examples: no evaluation "
      "(nothing written or reported).",
      name,
      step,
    )
    return False
  values = {k: v for k, v in metrics.items() if k != "examples"}
  logging.info(
    "%s at step %d: %s  (%d examples)",
    name,
    step,
    metrics_window.format_metrics(values),
    metrics["examples"],
  )
  if writer:
    writer.write(step, values, run=run)
    publish()
  return True
