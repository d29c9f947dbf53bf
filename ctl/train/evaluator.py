"""Side-car evaluation: an `evaluator` task follows the chief's checkpoints.

Vertex AI and AI Platform can run an evaluator task beside the training
workers (TF_CONFIG task type `evaluator`). It takes no part in training: it
polls the checkpoint directory, evaluates each new checkpoint once, writes
`loss` and `accuracy` into `<tensorboard_dir>/validation`, the run dir the
chief's in-loop evaluation writes when there is no evaluator (with one, the
chief leaves that run dir to it: RunOptions.evaluator_writes_validation), and
stops after evaluating the final step, or when no new checkpoint appears for
`timeout_secs`. It restores as the trainer does (`Checkpointer.restore_latest`:
the newest readable checkpoint, a damaged one skipped, the model and input
shape checked), and logs and writes as the run's own evaluation does
(`ctl.train.evaluation.record`).
"""

import posixpath
import time

from absl import logging
import tensorflow as tf

from ctl.checkpoint import checkpointing
from ctl.io import storage
from ctl.telemetry import summaries
from ctl.train import evaluation
from ctl.train import loop as loop_lib
from ctl.train import metric_set
from ctl.train import state as state_lib
from ctl.train import step as step_lib
from ctl.train.options import RunOptions
from ctl.train.options import Task


def evaluate_checkpoints(
  *,
  task: Task,
  options: RunOptions,
  strategy: tf.distribute.Strategy,
  poll_secs: float = 5.0,
  timeout_secs: float = 3600.0,
) -> dict:
  """Evaluates every new checkpoint until the final one.

  Args:
    task: what is trained (only the model and eval data are used).
    options: the training job's options (directories, train_steps).
    strategy: a single-machine strategy for this process.
    poll_secs: how often to look for a new checkpoint.
    timeout_secs: give up after this long without a new checkpoint.

  Returns:
    {step: metrics} for every checkpoint evaluated (none of a checkpoint
    whose evaluation saw no examples).

  Raises:
    UserError: no checkpoint in the directory can be read, or one was
      written by another model or for another input shape.
  """
  checkpoints, board = _locations(options)
  follower = _Follower(
    task=task, strategy=strategy, directory=checkpoints.local_path
  )
  writer = summaries.ScalarWriter(logdir=board.local_path)
  results, waited_since = {}, time.monotonic()
  try:
    while True:
      checkpoints.fetch()
      step = follower.restore_new()
      if step is not None:
        metrics = follower.evaluate()
        if evaluation.record(
          step,
          metrics,
          name="evaluator: eval",
          writer=writer,
          run="",  # `board` is the validation run dir itself.
          publish=board.publish,
        ):
          results[step] = metrics
        waited_since = time.monotonic()
        if step >= options.train_steps:
          return results
      elif time.monotonic() - waited_since > timeout_secs:
        logging.warning(
          "evaluator: no new checkpoint for %d s; stopping.", timeout_secs
        )
        return results
      time.sleep(poll_secs)
  finally:
    writer.close()
    follower.close()
    board.close()
    checkpoints.close()


class _Follower:
  """Restores each new checkpoint of a directory once, as the trainer does,
  and evaluates it."""

  def __init__(self, *, task: Task, strategy, directory: str):
    self._state = state_lib.build_state(
      task=task, strategy=strategy, with_optimizer=False
    )
    metrics = metric_set.MetricSet(task.build_metrics, strategy=strategy)
    self._loop = loop_lib.EvalLoop(
      strategy=strategy,
      model=self._state.model,
      compute_loss=step_lib.compute_loss_of(task, metric_names=metrics.names),
      metrics=metrics,
    )
    self._data = strategy.distribute_datasets_from_function(
      task.eval_dataset_fn
    )
    self._checkpointer = checkpointing.Checkpointer(
      checkpoint=self._state.checkpoint(),
      directory=directory,
      is_chief=False,  # Reads only: never rewrites a damaged state file.
      keep=1,
      partial=True,  # The optimizer is not restored.
    )
    self._directory = directory
    self._seen = self._restored = None

  def restore_new(self) -> int | None:
    """Restores the newest readable checkpoint if it is new: its step, or
    None (no new one)."""
    latest = checkpointing.latest_version(self._directory)
    if latest == self._seen:
      return None
    self._seen = latest
    path = self._checkpointer.restore_latest()
    # A damaged newest one falls back to one restored before: not new.
    if path is None or path == self._restored:
      return None
    self._restored = path
    return int(self._state.global_step.numpy())

  def evaluate(self) -> dict:
    """The eval loop's metrics of the model as last restored."""
    return self._loop.evaluate(self._data)

  def close(self) -> None:
    self._checkpointer.close()


def _locations(options: RunOptions):
  """(the checkpoints to follow, read-only; the validation run directory)."""
  routes = dict(storage=options.storage, fuse_root=options.fuse_root)
  return (
    storage.open_location(
      options.dirs.checkpoint_dir, read_only=True, **routes
    ),
    storage.open_location(
      posixpath.join(options.dirs.tensorboard_dir, summaries.VALIDATION),
      **routes,
    ),
  )
