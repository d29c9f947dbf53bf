"""Early stopping on validation accuracy, as a loop action of `ctl.run`.

A loop action is any callable `fn(step, result)`; `ctl.run` calls it after
every train loop, once that loop's own duties are done (log line, evaluation,
checkpoint). `result.eval_metrics` holds the evaluation that ran after the
loop, if one did. Raising `ctl.StopTraining` ends the run at that step the way
`train_steps` would: the checkpoint of the step, the SavedModel and
`train_summary.json`, whose `stopped_early` says where and why.

`EarlyStopping` below stops when the validation accuracy has not improved
on its best by `min_delta` in `patience` evaluations. It reads only reduced
metrics (the same on every worker), so under a multi-worker strategy every
worker stops at the same step. The model and data are those of
`own_model.py`: a small CNN learns three classes of noisy images quickly and
then plateaus, well before the `train_steps` of 400.

  python examples/loop_action.py [--model_dir=/tmp/loop_action]
"""

import argparse
import dataclasses
import os
import sys
import tempfile

import keras
import own_model  # The model, data and options of examples/own_model.py.
import tensorflow as tf

import ctl

TRAIN_STEPS = 400
EVAL_EVERY_STEPS = 10


class EarlyStopping:
  """A loop action: stops when validation accuracy stops improving."""

  def __init__(self, *, patience: int, min_delta: float = 0.0):
    """Initializes the rule.

    Args:
      patience: how many evaluations in a row may fail to improve the best.
      min_delta: how much better than the best counts as an improvement.
    """
    self._patience = patience
    self._min_delta = min_delta
    self.best, self.best_step, self._waited = None, None, 0

  def __call__(self, step: int, result: ctl.LoopResult) -> None:
    accuracy = result.eval_metrics.get("accuracy")
    if accuracy is None:  # No evaluation after this loop.
      return
    if self.best is None or accuracy > self.best + self._min_delta:
      self.best, self.best_step, self._waited = accuracy, step, 0
      return
    self._waited += 1
    if self._waited >= self._patience:
      raise ctl.StopTraining(
        f"validation accuracy {self.best:.4f} at step {self.best_step} "
        f"not improved in {self._patience} evaluations"
      )


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", default=None)
  args = parser.parse_args(argv)
  model_dir = args.model_dir or tempfile.mkdtemp(prefix="loop_action_")
  tf.config.experimental.enable_op_determinism()
  keras.utils.set_random_seed(0)
  options = dataclasses.replace(
    own_model.make_options(os.path.join(model_dir, "run")),
    train_steps=TRAIN_STEPS,
    eval_every_steps=EVAL_EVERY_STEPS,
    checkpoint_every_steps=50,
  )
  stopping = EarlyStopping(patience=3, min_delta=0.005)
  summary = ctl.run(
    task=own_model.make_task(),
    options=options,
    strategy=tf.distribute.get_strategy(),
    loop_actions=[stopping],
  )
  stopped = summary.get("stopped_early")
  print(
    f"final_step {summary['final_step']} of {TRAIN_STEPS}; eval accuracy "
    f"{summary['eval_accuracy']:.4f}; stopped_early: {stopped}"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
