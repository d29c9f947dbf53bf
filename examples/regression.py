"""A regression with `ctl.run`: real tabular data, MSE loss, MAE and RMSE.

scikit-learn's bundled diabetes data (442 patients, 10 standardized
features, a disease-progression score; no download) and a small MLP. Nothing
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
import sys

import keras
import numpy as np
from sklearn import datasets
import tensorflow as tf

import ctl
from ctl.data import input as ctl_input

GLOBAL_BATCH = 32
TRAIN_STEPS = 120


def load_data() -> tuple[tuple[np.ndarray, np.ndarray], ...]:
  """(train, validation) splits of (features, target), the target scaled to
  unit variance so a learning rate fits it."""
  features, target = datasets.load_diabetes(return_X_y=True)
  features = features.astype(np.float32)
  target = ((target - target.mean()) / target.std()).astype(np.float32)
  order = np.random.default_rng(0).permutation(len(target))
  train, valid = order[:352], order[352:]
  return (features[train], target[train]), (features[valid], target[valid])


def make_task() -> ctl.Task:
  """The model, its loss and metrics, and the data, as plain callables."""
  train, valid = load_data()
  train_records = ctl_input.IndexedRecords.from_tensors(train)
  valid_records = ctl_input.IndexedRecords.from_tensors(valid)
  as_is = lambda features, target: (features, target)

  def train_dataset_fn(input_context, start_step, seed):
    return ctl_input.train_dataset(
      records=train_records,
      decode_fn=as_is,
      input_context=input_context,
      global_batch_size=GLOBAL_BATCH,
      seed=seed,
      start_step=start_step,
    )

  def eval_dataset_fn(input_context):
    return ctl_input.eval_dataset(
      records=valid_records,
      decode_fn=as_is,
      input_context=input_context,
      global_batch_size=GLOBAL_BATCH,
    )

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


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--train_steps", type=int, default=TRAIN_STEPS)
  args = parser.parse_args(argv)
  tf.config.experimental.enable_op_determinism()  # Bitwise-repeatable ops.
  keras.utils.set_random_seed(0)  # The initial weights.
  env = ctl.environment(model_dir=args.model_dir)  # Cluster and outputs.
  summary = ctl.run(
    task=make_task(),
    options=ctl.RunOptions(
      **env.option_values(),  # Output dirs, chief, job id, restarts.
      train_steps=args.train_steps,
      steps_per_loop=10,
      log_every_steps=20,
      eval_every_steps=40,
      checkpoint_every_steps=20,
      checkpoint_every_secs=0,
    ),
    strategy=env.strategy,
  )
  if env.is_chief:
    keys = ("final_step", "eval_loss", "eval_mae", "eval_rmse")
    print(json.dumps({k: summary[k] for k in (*keys, "weights_fingerprint")}))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
