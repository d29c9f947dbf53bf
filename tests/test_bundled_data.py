"""The real data that ships in the repository: the quick start's digits
(trainer/bundled_data/) and the regression example's diabetes data
(examples/data/), each read where scikit-learn is not installed.

Both files are scikit-learn 1.9.1's own, byte for byte (the README beside
each names the source and the license): scikit-learn is no longer a
dependency, so Keras, which imports it wherever it is installed, no longer
spends about 1.2 s of CPU on it in every TensorFlow process.
"""

import hashlib
import os
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from trainer import data

# scikit-learn 1.9.1's sklearn/datasets/data/<name>, as its wheel holds it.
_SCIKIT_LEARN_FILES = {
  "trainer/bundled_data/digits.csv.gz": (
    "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"
  ),
  "examples/data/diabetes_data_raw.csv.gz": (
    "7fc0ded571454b1982210d3bb43f0aca44eae01a0b8654a3b24022bdb6b38009"
  ),
  "examples/data/diabetes_target.csv.gz": (
    "8e53f65eb811df43c206f3534bb3af0e5fed213bc37ed6ba36310157d6023803"
  ),
}


@pytest.fixture
def no_scikit_learn(monkeypatch):
  """Within the test, scikit-learn imports as if it were not installed."""
  for name in [n for n in sys.modules if n.split(".")[0] == "sklearn"]:
    monkeypatch.delitem(sys.modules, name)
  monkeypatch.setitem(sys.modules, "sklearn", None)


@pytest.mark.parametrize("path", sorted(_SCIKIT_LEARN_FILES))
def test_each_file_is_scikit_learns_own(path):
  with open(os.path.join(REPO, path), "rb") as f:
    assert hashlib.sha256(f.read()).hexdigest() == _SCIKIT_LEARN_FILES[path]


def test_the_digits_load_without_scikit_learn(no_scikit_learn):
  del no_scikit_learn  # Used for its effect.
  images, labels = data._digits_arrays()  # pylint: disable=protected-access
  assert images.shape == (1797, 8, 8) and labels.dtype == np.int64
  assert images.min() == 0 and images.max() == 16
  assert np.array_equal(images, np.round(images))  # Counts of on-pixels.
  # The UCI test set's digits per class (load_digits' DESCR).
  assert np.bincount(labels).tolist() == [
    178, 182, 177, 183, 181, 182, 181, 179, 174, 180,
  ]  # fmt: skip
  source = data.load("digits", image_size=8)
  assert source.num_train == 1797 - 359 and source.num_classes == 10


def test_the_regression_example_reads_its_data_without_scikit_learn(
  no_scikit_learn, monkeypatch
):
  del no_scikit_learn  # Used for its effect.
  monkeypatch.syspath_prepend(os.path.join(REPO, "examples"))
  monkeypatch.delitem(sys.modules, "regression", raising=False)
  import regression  # pylint: disable=g-import-not-at-top

  (x_train, y_train), (x_valid, y_valid) = regression.load_data()
  assert x_train.shape == (352, 10) and x_valid.shape == (90, 10)
  assert x_train.dtype == y_train.dtype == np.float32
  features = np.concatenate([x_train, x_valid])
  target = np.concatenate([y_train, y_valid])
  # load_diabetes' scaling: each feature centered, its squares summing to 1;
  # the example's target: centered, unit variance.
  np.testing.assert_allclose(features.mean(axis=0), 0, atol=1e-7)
  np.testing.assert_allclose((features**2).sum(axis=0), 1, rtol=1e-5)
  assert abs(target.mean()) < 1e-6 and abs(target.std() - 1) < 1e-5
  # The first patient of the raw file (age 59, female, BMI 32.1, ...) as
  # load_diabetes scales it, in one of the splits.
  first = [0.03807591, 0.05068012, 0.06169621, 0.02187239, -0.0442235,
           -0.03482076, -0.04340085, -0.00259226, 0.01990749, -0.01764613]  # fmt: skip
  assert np.isclose(features, first, atol=1e-7).all(axis=1).sum() == 1
