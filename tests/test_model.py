"""trainer.model: float32 logits under any policy, clear errors otherwise."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from ctl.errors import UserError
from trainer import model as model_lib


@pytest.fixture
def mixed_bfloat16():
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  yield
  keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize(
  "name,image_size", [("small_cnn", 16), ("resnet50", 32)]
)
def test_logits_are_float32_under_mixed_bfloat16(
  mixed_bfloat16, name, image_size
):
  del mixed_bfloat16
  model = model_lib.build_model(
    name=name,
    num_classes=7,
    image_shape=(image_size, image_size, 3),
    dropout=0.2,
  )
  images = (
    np.random.RandomState(0)
    .uniform(size=(2, image_size, image_size, 3))
    .astype(np.float32)
  )
  logits = model(images, training=True)
  assert logits.dtype == tf.float32
  assert logits.shape == (2, 7)
  assert np.isfinite(logits.numpy()).all()
  # The policy was in effect: the body computes in bfloat16.
  compute_dtypes = {
    layer.compute_dtype for layer in model.layers if layer.weights
  }
  assert "bfloat16" in compute_dtypes
  assert model.get_layer("logits").compute_dtype == "float32"
  assert all(v.dtype == "float32" for v in model.trainable_variables)


def test_small_cnn_dropout_is_optional():
  def dropouts(**kwargs):
    model = model_lib.build_model(
      name="small_cnn", num_classes=3, image_shape=(8, 8, 3), **kwargs
    )
    return [
      layer.rate
      for layer in model.layers
      if isinstance(layer, keras.layers.Dropout)
    ]

  assert dropouts() == []
  assert dropouts(dropout=0.3) == [pytest.approx(0.3)]


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (
      dict(name="vgg16"),
      "Unknown model 'vgg16'; choose one of resnet50, small_cnn.",
    ),
    (
      dict(name="small_cnn", weights="imagenet"),
      "--weights applies to resnet50 only",
    ),
    (
      dict(name="resnet50", weights="/no/such/file.h5"),
      "Weights file /no/such/file.h5 not found",
    ),
    (dict(name="small_cnn", dropout=1.0), r"--dropout must be in \[0, 1\)"),
  ],
)
def test_bad_choices_are_user_errors(kwargs, match):
  with pytest.raises(UserError, match=match):
    model_lib.build_model(num_classes=3, image_shape=(32, 32, 3), **kwargs)
