"""A regression with `ctl.run`: real tabular data, MSE loss, MAE and RMSE.

The diabetes data of Efron et al. (442 patients, 10 standardized
features, a disease-progression score; examples/data/, no download) and a small MLP. Nothing
here is image classification: the batches are `(features, target)`, the loss
is the per-example squared error, and the metrics are Keras's, by name. The
same script runs on a laptop, under `ctl-launch --num_workers=2`, on Vertex
AI and on GKE: `ctl.environment` reads the cluster and the output
directories from the environment.

  python examples/regression.py --model_dir=/tmp/regression
  python -m ctl.launch --num_workers=2 -- \
      python examples/regression.py --model_dir=/tmp/regression2

It prints the chief's summary as one JSON line: the final step, the
validation loss, MAE and RMSE, and the `weights_fingerprint`. A run killed
at any point and started again ends with the same line.
"""

import argparse
import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

import ctl
from ctl.data import input as ctl_input

GLOBAL_BATCH = 32
TRAIN_STEPS = 120


def load_data() -> tuple[tuple[np.ndarray, np.ndarray], ...]:
  """(train, validation) splits of (features, target): the features scaled
  as `sklearn.datasets.load_diabetes` scales them (each centered, its
  squares summing to 1), the target to unit variance so a learning rate
  fits it. The files are scikit-learn's (examples/data/README.md)."""
  folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
  features = np.loadtxt(os.path.join(folder, "diabetes_data_raw.csv.gz"))
  target = np.loadtxt(os.path.join(folder, "diabetes_target.csv.gz"))
  features = (features - features.mean(axis=0)) / features.std(axis=0)
  features = (features / len(features) ** 0.5).astype(np.float32)
  target = ((target - target.mean()) / target.std()).astype(np.float32)
  order = np.random.default_rng(0).permutation(len(target))
  train, valid = order[:352], order[352:]
  return (features[train], target[train]), (features[valid], target[valid])


def make_task() -> ctl.Task:
  """The model, its loss and metrics, and the data, as plain callables."""
  train, valid = load_data()
  train_dataset_fn, eval_dataset_fn = ctl_input.dataset_fns(
    train_records=ctl_input.IndexedRecords.from_tensors(train),
    eval_records=ctl_input.IndexedRecords.from_tensors(valid),
    decode_fn=lambda features, target: (features, target),
    global_batch_size=GLOBAL_BATCH,
  )  # Seeded, resumable: a step's batch is a function of the step.
  return ctl.Task(
    build_model=lambda: keras.Sequential(
      [
        keras.Input((10,), name="features"),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
        keras.layers.Reshape(()),  # One score per example.
      ]
    ),
    build_optimizer=lambda: keras.optimizers.Adam(0.01),
    train_dataset_fn=train_dataset_fn,
    eval_dataset_fn=eval_dataset_fn,
    global_batch_size=GLOBAL_BATCH,
    loss_fn=lambda y, y_pred: tf.square(y - y_pred),  # Per example.
    build_metrics=lambda: {
      "mae": keras.metrics.MeanAbsoluteError(),
      "rmse": keras.metrics.RootMeanSquaredError(),
    },
  )


def run_example(argv, make_task_fn, *, report, loop_actions=(), **options):
  """Parses `--model_dir` and `--train_steps`, trains the task
  `make_task_fn` makes with `options` (each example's intervals) and
  `loop_actions` wherever the environment says, and prints the chief's
  summary: `report` and the `weights_fingerprint`, as one JSON line (a key
  the summary lacks is null). One sentence and ctl's exit status for what
  `ctl.run` raises (`ctl.exit_code`: 2 for a mistake, 77 for a lost lease,
  which `ctl-launch` does not restart, 143 after a preemption's save)."""
  parser = argparse.ArgumentParser()
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--train_steps", type=int, default=TRAIN_STEPS)
  args = parser.parse_args(argv)
  tf.config.experimental.enable_op_determinism()  # Bitwise-repeatable ops.
  keras.utils.set_random_seed(0)  # The initial weights.
  try:
    env = ctl.environment(model_dir=args.model_dir)  # Cluster and outputs.
    summary = ctl.run(
      task=make_task_fn(),
      options=ctl.RunOptions(
        **env.option_values(),  # Output dirs, chief, job id, restarts.
        train_steps=args.train_steps,
        checkpoint_every_secs=0,  # Step-based saves only.
        **options,
      ),
      strategy=env.strategy,
      loop_actions=loop_actions,
    )
  except Exception as e:  # pylint: disable=broad-except
    code = ctl.exit_code(e)  # ctl's own: a mistake, a lost lease, a stall.
    if code is None:
      raise
    print(f"error: {e}", file=sys.stderr)
    return code
  if env.is_chief:
    keys = (*report, "weights_fingerprint")
    print(json.dumps({key: summary.get(key) for key in keys}))
  return 0


if __name__ == "__main__":
  sys.exit(
    run_example(
      sys.argv[1:],
      make_task,
      report=("final_step", "eval_loss", "eval_mae", "eval_rmse"),
      steps_per_loop=10,
      log_every_steps=20,
      eval_every_steps=40,
      checkpoint_every_steps=20,
    )
  )
