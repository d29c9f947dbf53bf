"""ctl.checkpoint.serving: a task's serving signature is checked before
TensorFlow loads, and the image task's signature serves logits and
probabilities (the export itself: tests/test_export.py)."""

import keras
import numpy as np
import pytest

from ctl.checkpoint import serving
from tests.conftest import heavy_modules_loaded_by


@pytest.mark.processes
def test_the_task_and_its_serving_load_no_tensorflow():
  assert (
    heavy_modules_loaded_by("ctl.checkpoint.serving", "ctl.train.options") == []
  )


def test_the_image_signature_serves_logits_and_their_softmax():
  signature = serving.image_serving((4, 4, 1))
  assert signature.input_signature.name == "images"
  model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten()])
  images = np.random.default_rng(0).random((2, 4, 4, 1), dtype=np.float32)
  out = signature.fn(model, images)
  logits = images.reshape(2, 16)
  np.testing.assert_allclose(out["logits"], logits, rtol=1e-6)
  expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
  np.testing.assert_allclose(out["probabilities"], expected, rtol=1e-5)
