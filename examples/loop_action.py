"""Early stopping on validation accuracy, as a loop action of `ctl.run`.

A loop action is any callable `fn(step, result)`; `ctl.run` calls it after
every train loop, once that loop's log line and evaluation are done and
before its checkpoint (which so holds what the action decided).
`result.eval_metrics` holds the evaluation that ran after the loop, if one
did. Raising `ctl.StopTraining` ends the run at that step the way
`train_steps` would: the checkpoint of the step, the SavedModel and
`train_summary.json`, whose `stopped_early` says where and why.

`ctl.EarlyStopping` stops when the validation accuracy has not improved on
its best by `min_delta` in `patience` evaluations. It reads only reduced
metrics (the same on every worker), so under a multi-worker strategy every
worker stops at the same step; its best value and patience counter are
variables saved in every checkpoint, so a run killed and resumed stops at the
step the uninterrupted run stops at (tests/test_actions.py). Any callable
`fn(step, result)` is an action; one that is a `tf.Module` holding variables
has them checkpointed the same way. The model and data are those of
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
  stopping = ctl.EarlyStopping(
    metric="accuracy", mode="max", patience=3, min_delta=0.005
  )
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
