"""Small tasks that are not image classification, for in-process runs of
`ctl.train.controller.run` (the examples in examples/ run them end to end)."""

import dataclasses
import os

import keras
import numpy as np
import tensorflow as tf

from ctl.data import input as input_lib
from ctl.io.outputs import OutputDirs
from ctl.train import options as options_lib

FEATURES = 5
BATCH = 16


def _data(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Features and a noisy linear target."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(count, FEATURES)).astype(np.float32)
  y = (x @ np.arange(1, FEATURES + 1) / FEATURES).astype(np.float32)
  return x, y + rng.normal(0, 0.1, count).astype(np.float32)


def eval_records() -> tuple[np.ndarray, np.ndarray]:
  """The features and targets `regression`'s evaluation reads, in order."""
  return _data(64, seed=2)


def regression(**fields) -> options_lib.Task:
  """A linear regression with MSE loss and an MAE metric; `fields` replace
  the task's."""
  train_dataset_fn, eval_dataset_fn = input_lib.dataset_fns(
    train_records=input_lib.IndexedRecords.from_tensors(_data(256, seed=1)),
    eval_records=input_lib.IndexedRecords.from_tensors(eval_records()),
    decode_fn=lambda x, y: (x, y),
    global_batch_size=BATCH,
  )
  task = options_lib.Task(
    build_model=lambda: keras.Sequential(
      [
        keras.Input((FEATURES,), name="x"),
        keras.layers.Dense(1),
        keras.layers.Reshape(()),
      ]
    ),
    build_optimizer=lambda: keras.optimizers.SGD(0.05),
    train_dataset_fn=train_dataset_fn,
    eval_dataset_fn=eval_dataset_fn,
    global_batch_size=BATCH,
    loss_fn=lambda y, y_pred: tf.square(y - y_pred),
    build_metrics=lambda: {"mae": keras.metrics.MeanAbsoluteError()},
  )
  return dataclasses.replace(task, **fields)


def run_options(model_dir, **fields) -> options_lib.RunOptions:
  """Loops of 5 steps, each logged; `fields` replace the options."""
  model_dir = str(model_dir)
  values = dict(
    dirs=OutputDirs(
      model_dir=model_dir,
      checkpoint_dir=os.path.join(model_dir, "checkpoints"),
      tensorboard_dir=os.path.join(model_dir, "tensorboard"),
      export_dir=os.path.join(model_dir, "saved_model"),
    ),
    train_steps=20,
    steps_per_loop=5,
    log_every_steps=5,
    eval_every_steps=10,
    checkpoint_every_steps=10,
    checkpoint_every_secs=0,
    local_checkpoints="off",
  )
  return options_lib.RunOptions(**(values | fields))


def written(model_dir) -> list[str]:
  """What a run left that a reader would take for a result: checkpoints,
  an export, a summary."""
  found = []
  for name in ("checkpoints", "saved_model", "train_summary.json"):
    path = os.path.join(str(model_dir), name)
    if os.path.isfile(path) or (os.path.isdir(path) and os.listdir(path)):
      found.append(name)
  return found
