"""A step of your own with `ctl.run`: an auxiliary loss and gradient clipping.

The model of `regression.py`'s data has two heads: the score, and an
auxiliary head on the first hidden layer, trained with 0.3 of its own loss
(deep supervision). `Task.replica_step` is the whole update: the tape, the
gradients clipped by their global norm, the optimizer. ctl still runs it on
every replica, many steps per `tf.function` call, averages the loss over the
global batch (`context.average_loss`), checkpoints, resumes and exports.
`Task.compute_loss`, the same forward pass, serves evaluation; the
auxiliary loss is reported as a metric of its own (`aux_loss`).

  python examples/custom_step.py --model_dir=/tmp/custom_step

It prints the chief's summary as one JSON line; under `ctl-launch` a run
killed at any point and started again ends with the same line.
"""

import dataclasses
import sys

import keras
import regression  # The data and pipeline of examples/regression.py.
import tensorflow as tf

import ctl

AUX_WEIGHT = 0.3
CLIP_NORM = 1.0


def build_model() -> keras.Model:
  """Features -> {"score", "aux"}: the auxiliary head reads the first
  hidden layer."""
  features = keras.Input((10,), name="features")
  hidden = keras.layers.Dense(32, activation="relu")(features)
  deeper = keras.layers.Dense(16, activation="relu")(hidden)
  score = keras.layers.Reshape(())(keras.layers.Dense(1)(deeper))
  aux = keras.layers.Reshape(())(keras.layers.Dense(1)(hidden))
  return keras.Model(features, {"score": score, "aux": aux})


def compute_loss(model, batch, training) -> ctl.StepOutput:
  """The forward pass: per-example loss of both heads, and what the
  metrics read (the score, and the auxiliary loss as a value)."""
  features, target = batch
  outputs = model(features, training=training)
  main = tf.square(target - outputs["score"])
  aux = tf.square(target - outputs["aux"])
  return ctl.StepOutput(
    per_example_loss=main + AUX_WEIGHT * aux,
    y_true=target,
    y_pred=outputs["score"],
    values={"aux_loss": aux},
  )


def replica_step(context: ctl.StepContext, batch) -> ctl.StepOutput:
  """The whole update of one replica: its gradients clipped by their global
  norm (this replica's share, as Keras's `global_clipnorm` clips)."""
  variables = context.model.trainable_variables
  with tf.GradientTape() as tape:
    output = compute_loss(context.model, batch, training=True)
    loss = context.average_loss(output.per_example_loss)
    scaled = context.optimizer.scale_loss(loss)  # Mixed-float16 safe.
  gradients, _ = tf.clip_by_global_norm(
    tape.gradient(scaled, variables), CLIP_NORM
  )
  context.optimizer.apply_gradients(zip(gradients, variables))
  return output


def make_task() -> ctl.Task:
  """regression.py's data, this model and step, MAE and the auxiliary loss."""
  return dataclasses.replace(
    regression.make_task(),
    build_model=build_model,
    loss_fn=None,
    compute_loss=compute_loss,
    replica_step=replica_step,
    build_metrics=lambda: {
      "mae": keras.metrics.MeanAbsoluteError(),
      "aux_loss": keras.metrics.Mean(),
    },
  )


if __name__ == "__main__":
  sys.exit(
    regression.run_example(
      sys.argv[1:],
      make_task,
      report=("final_step", "eval_loss", "eval_mae", "eval_aux_loss"),
      steps_per_loop=20,
      log_every_steps=20,
      eval_every_steps=60,
      checkpoint_every_steps=40,
    )
  )
