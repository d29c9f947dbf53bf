"""A user's script: the same alone and under ctl-launch (test_environment)."""

import argparse

import keras
import numpy as np
import tensorflow as tf

import ctl

parser = argparse.ArgumentParser()
parser.add_argument("--model_dir")
env = ctl.environment(model_dir=parser.parse_args().model_dir)  # First.
print(f"rank {env.rank} of {env.num_workers}, chief {env.is_chief}")
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x @ np.arange(4, dtype="float32")


def train_dataset_fn(context, start_step, seed):
  del seed  # The rows are in a fixed order.
  rows = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
  rows = rows.shard(context.num_input_pipelines, context.input_pipeline_id)
  return rows.batch(context.get_per_replica_batch_size(16)).skip(start_step)


task = ctl.Task(
  build_model=lambda: keras.Sequential(
    [keras.Input((4,)), keras.layers.Dense(1)]
  ),
  build_optimizer=lambda: keras.optimizers.SGD(0.05),
  train_dataset_fn=train_dataset_fn,
  eval_dataset_fn=None,
  global_batch_size=16,
  loss_fn=lambda labels, outputs: tf.square(labels - outputs[:, 0]),
)
steps = dict(train_steps=20, steps_per_loop=10, log_every_steps=10)
options = ctl.RunOptions(**env.option_values(), **steps, train_metrics=False)
ctl.run(task=task, options=options, strategy=env.strategy)
