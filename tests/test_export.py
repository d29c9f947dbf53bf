"""ctl.export: a SavedModel that serves what the model computes."""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

from ctl import export
from trainer import model as model_lib

IMAGE_SHAPE = (12, 12, 3)


def _model():
  keras.utils.set_random_seed(0)
  return model_lib.build_model(
    name="small_cnn", num_classes=4, image_shape=IMAGE_SHAPE, dropout=0.5
  )


def _images(count=5):
  return (
    np.random.RandomState(0)
    .uniform(size=(count, *IMAGE_SHAPE))
    .astype(np.float32)
  )


def test_reloaded_saved_model_agrees_with_the_model(tmp_path):
  model = _model()
  export_dir = str(tmp_path / "saved_model")
  export.export_saved_model(
    model=model, export_dir=export_dir, image_shape=IMAGE_SHAPE
  )
  assert os.path.isfile(os.path.join(export_dir, "saved_model.pb"))

  serving = tf.saved_model.load(export_dir).signatures["serving_default"]
  assert set(serving.structured_input_signature[1]) == {"images"}
  images = _images()
  outputs = serving(images=tf.constant(images))
  assert set(outputs) == {"logits", "probabilities"}
  assert outputs["logits"].dtype == tf.float32
  expected = model(images, training=False).numpy()  # Dropout off.
  np.testing.assert_allclose(
    outputs["logits"].numpy(), expected, rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(
    outputs["probabilities"].numpy(),
    tf.nn.softmax(expected).numpy(),
    rtol=1e-5,
    atol=1e-6,
  )
  assert not np.allclose(expected, expected[:1])  # The inputs really differ.
  # Any batch size is served.
  assert serving(images=tf.constant(images[:1]))["logits"].shape == (1, 4)


def test_non_chief_export_leaves_no_directory(tmp_path, monkeypatch):
  scratch_root = tmp_path / "tmp"
  scratch_root.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
  monkeypatch.chdir(tmp_path)
  export.export_saved_model(
    model=_model(), export_dir=None, image_shape=IMAGE_SHAPE
  )
  assert os.listdir(scratch_root) == []
  assert os.listdir(tmp_path) == ["tmp"]
