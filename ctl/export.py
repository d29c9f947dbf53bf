"""SavedModel export with a serving signature that takes a batch of images.

Every worker exports (saving may read synchronized variables collectively),
but only the chief writes to the real directory; the others write to a
temporary directory that is removed at once.
"""

import shutil
import tempfile

import keras
import tensorflow as tf


def export_saved_model(
  *,
  model: keras.Model,
  export_dir: str | None,
  image_shape: tuple[int, int, int],
) -> None:
  """Exports `model` with a `serving_default` signature.

  The signature takes float32 images `[batch, height, width, channels]` with
  values in [0, 1] and returns float32 `logits` and `probabilities`.

  Args:
    model: the trained model.
    export_dir: where the chief writes the SavedModel; None on the other
      workers, which write to a temporary directory that is removed.
    image_shape: (height, width, channels) of one input image.
  """
  archive = keras.export.ExportArchive()
  archive.track(model)

  def serve(images):
    logits = tf.cast(model(images, training=False), tf.float32)
    return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

  archive.add_endpoint(
    name="serving_default",
    fn=serve,
    input_signature=[
      tf.TensorSpec([None, *image_shape], tf.float32, name="images")
    ],
  )
  target = export_dir or tempfile.mkdtemp(prefix="ctl_export_")
  try:
    archive.write_out(target, verbose=False)
  finally:
    if not export_dir:
      shutil.rmtree(target, ignore_errors=True)
