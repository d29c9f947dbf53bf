"""Side-car evaluation: an `evaluator` task follows the chief's checkpoints.

Vertex AI and AI Platform can run an evaluator task beside the training
workers (TF_CONFIG task type `evaluator`). It takes no part in training: it
polls the checkpoint directory, evaluates each new checkpoint once, writes
`loss` and `accuracy` into `<tensorboard_dir>/validation`, the run dir the
chief's in-loop evaluation writes when there is no evaluator (with one, the
chief leaves that run dir to it: RunOptions.evaluator_writes_validation), and
stops after evaluating the final step, or when no new checkpoint appears for
`timeout_secs`.
"""

import posixpath
import time

from absl import logging
import tensorflow as tf

from ctl import loop as loop_lib
from ctl import state as state_lib
from ctl import storage
from ctl import summaries
from ctl.options import RunOptions
from ctl.options import Task


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
  """
  checkpoints, board = _locations(options)
  state = state_lib.build_state(
    task=task, strategy=strategy, with_optimizer=False
  )
  checkpoint = state.checkpoint()
  loop = loop_lib.EvalLoop(
    strategy=strategy, model=state.model, loss_fn=task.loss_fn
  )
  data = strategy.distribute_datasets_from_function(task.eval_dataset_fn)
  writer = summaries.ScalarWriter(logdir=board.local_path)
  results, last_path, waited_since = {}, None, time.monotonic()
  try:
    while True:
      checkpoints.fetch()
      path = tf.train.latest_checkpoint(checkpoints.local_path)
      if path and path != last_path:
        checkpoint.restore(path).expect_partial()
        step = int(state.global_step.numpy())
        metrics = loop.evaluate(data)
        _record(step, metrics, results=results, writer=writer, board=board)
        last_path, waited_since = path, time.monotonic()
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
    board.close()
    checkpoints.close()


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


def _record(step, metrics, *, results, writer, board) -> None:
  """Logs and writes one evaluation; one of no examples is none."""
  if not metrics["examples"]:
    logging.warning(
      "evaluator: step %d: the validation data holds no examples: no "
      "evaluation (nothing written).",
      step,
    )
    return
  results[step] = metrics
  logging.info(
    "evaluator: step %d accuracy %.4f loss %.4f",
    step,
    metrics["accuracy"],
    metrics["loss"],
  )
  writer.write(
    step,
    {"loss": metrics["loss"], "accuracy": metrics["accuracy"]},
    run="",
  )  # `board` is the validation run dir itself.
  board.publish()
