"""The SavedModel's serving signature, as a task says it (no TensorFlow on
import: ctl.train.tasks and command lines check it before TensorFlow loads).

`Serving` is a signature of the user's own; `FROM_MODEL` (the default) one
made from the model's own inputs (ctl.checkpoint.export); `image_serving`
the ready-made one of the image classification task.
"""

from collections.abc import Callable
import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Serving:
  """The SavedModel's `serving_default` signature.

  Attributes:
    fn: `(model, inputs) -> {name: tensor}`, traced with `input_signature`.
    input_signature: a `tf.TensorSpec` or a nested structure of them (a
      dict of named inputs serves a dict request); one argument.
  """

  fn: Callable
  input_signature: Any


# Task.serving's default: a signature made from the model's own inputs.
FROM_MODEL = "model"


def image_serving(image_shape: tuple[int, int, int]) -> Serving:
  """`serving_default(images)`: float32 images `[batch, *image_shape]` in
  [0, 1] -> float32 `logits` and `probabilities`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def serve(model, images):
    logits = tf.cast(model(images, training=False), tf.float32)
    return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

  return Serving(
    fn=serve,
    input_signature=tf.TensorSpec(
      [None, *image_shape], tf.float32, name="images"
    ),
  )
