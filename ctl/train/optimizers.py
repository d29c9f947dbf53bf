"""Keras optimizers whose update of a variable is one fused TensorFlow op.

Keras 3 writes Adam's and momentum SGD's update of each variable as some
twenty small ops (casts, powers, the two moments, the step), so the train
step of a ResNet50 (216 variables) holds thousands of them. Each is traced in
Python, then optimized and instantiated by TensorFlow at the first call of
every process, and, on a GPU, launched as its own kernel at every step.
TensorFlow has each of these updates as one kernel (`ResourceApplyAdam`,
`ResourceApplyKerasMomentum`), computing the same formulas. These
subclasses call those kernels and change nothing else: the same variables
(a checkpoint of the Keras optimizer restores into them, and back), the
same hyperparameters, schedules, clipping, weight decay and loss scaling.
Measured on a ResNet50 train loop (docs/framework.md, "The step"), a
restart's tracing and first call take about a third less time, and a step
on the CPU about a quarter less.

What the kernels do not cover falls back to Keras's own update: Adam with
`amsgrad`, sparse gradients (`tf.IndexedSlices`), and variables that are not
TensorFlow resource variables.
"""

import keras
import tensorflow as tf


def _fusable(gradient, variable) -> bool:
  return not isinstance(gradient, tf.IndexedSlices) and hasattr(
    variable, "handle"
  )


def _handle(slot: keras.Variable) -> tf.Tensor:
  """The resource handle of an optimizer slot; under a strategy's update
  call, the handle of the copy on the device being updated."""
  return slot.value.handle


class Adam(keras.optimizers.Adam):
  """`keras.optimizers.Adam`, each variable updated by `ResourceApplyAdam`."""

  def update_step(self, gradient, variable, learning_rate):
    if self.amsgrad or not _fusable(gradient, variable):
      return super().update_step(gradient, variable, learning_rate)
    dtype = variable.dtype
    step = tf.cast(self.iterations + 1, dtype)
    beta_1 = tf.cast(self.beta_1, dtype)
    beta_2 = tf.cast(self.beta_2, dtype)
    index = self._get_variable_index(variable)
    tf.raw_ops.ResourceApplyAdam(
      var=variable.handle,
      m=_handle(self._momentums[index]),
      v=_handle(self._velocities[index]),
      beta1_power=tf.pow(beta_1, step),
      beta2_power=tf.pow(beta_2, step),
      lr=tf.cast(learning_rate, dtype),
      beta1=beta_1,
      beta2=beta_2,
      epsilon=tf.cast(self.epsilon, dtype),
      grad=tf.cast(gradient, dtype),
    )


class SGD(keras.optimizers.SGD):
  """`keras.optimizers.SGD`, each variable updated by one kernel:
  `ResourceApplyKerasMomentum` with momentum, else
  `ResourceApplyGradientDescent`."""

  def update_step(self, gradient, variable, learning_rate):
    if not _fusable(gradient, variable):
      return super().update_step(gradient, variable, learning_rate)
    dtype = variable.dtype
    learning_rate = tf.cast(learning_rate, dtype)
    gradient = tf.cast(gradient, dtype)
    if self.momentum == 0:
      tf.raw_ops.ResourceApplyGradientDescent(
        var=variable.handle, alpha=learning_rate, delta=gradient
      )
      return
    tf.raw_ops.ResourceApplyKerasMomentum(
      var=variable.handle,
      accum=_handle(self.momentums[self._get_variable_index(variable)]),
      lr=learning_rate,
      grad=gradient,
      momentum=tf.cast(self.momentum, dtype),
      use_nesterov=self.nesterov,
    )
