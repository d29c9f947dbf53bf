"""A generated TFDS image dataset of small JPEGs, built offline.

Stands in for cassava (a TFDS dataset with `image` and `label` features and
`train` / `validation` splits) in the input-at-scale benchmark and in tests:
the same reader reads it, in ArrayRecord (by index) or TFRecord (streamed)
format. Image `i` has the colour of its class (`i % num_classes`) plus noise,
so a model can learn it. A bank of at most 64 JPEGs per class is encoded
(PIL) and reused, so 50,000 records take seconds, most of it TFDS's own
writing.
"""

import io
import tempfile

import numpy as np
from PIL import Image
import tensorflow_datasets as tfds

COLORS = np.array(
  [(220, 40, 40), (40, 200, 60), (50, 60, 220), (220, 200, 40), (180, 60, 200)],
  np.float32,
)


class GeneratedJpegs(tfds.core.GeneratorBasedBuilder):
  """`num_train` + `num_eval` JPEGs of `image_size` pixels, 3 to 5 classes."""

  VERSION = tfds.core.Version("1.0.0")

  def __init__(
    self,
    *,
    num_train: int,
    num_eval: int,
    image_size: int,
    num_classes: int = 3,
    **kwargs,
  ):
    self._num_train = num_train
    self._num_eval = num_eval
    self._image_size = image_size
    self._num_classes = num_classes
    super().__init__(**kwargs)

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls):
    # TFDS looks for a checksums file beside a builder's code, through a
    # module (importlib_resources) it does not install; this one has none.
    return None

  def _info(self):
    return tfds.core.DatasetInfo(
      builder=self,
      features=tfds.features.FeaturesDict(
        {
          "image": tfds.features.Image(
            shape=(None, None, 3), encoding_format="jpeg"
          ),
          "label": tfds.features.ClassLabel(num_classes=self._num_classes),
        }
      ),
      supervised_keys=("image", "label"),
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    return {
      "train": self._generate_examples(0, self._num_train),
      "validation": self._generate_examples(self._num_train, self._num_eval),
    }

  def _generate_examples(self, first, count):
    rng = np.random.RandomState(first)
    size = self._image_size
    for index in range(first, first + count):
      label = index % self._num_classes
      pixels = COLORS[label] + rng.normal(0, 25, size=(size, size, 3))
      buffer = io.BytesIO()
      Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(
        buffer, format="JPEG", quality=90
      )
      yield index, {"image": buffer.getvalue(), "label": label}


def build(
  data_dir: str,
  *,
  file_format: str,
  num_train: int,
  num_eval: int,
  image_size: int,
) -> str:
  """Builds the dataset once into `data_dir`; returns its version directory.

  Args:
    data_dir: a TFDS data directory; a dataset already prepared there is
      reused, so give each size its own.
    file_format: "array_record" (read by index) or "tfrecord" (streamed).
    num_train: training examples.
    num_eval: validation examples.
    image_size: side of the square JPEGs.
  """
  # A builder of a dataset not prepared yet makes a directory under the
  # temporary one (for metadata from the TFDS bucket, which it never has for
  # this dataset) and leaves it there: made in one of our own instead.
  with tempfile.TemporaryDirectory() as scratch:
    system_tmp, tempfile.tempdir = tempfile.tempdir, scratch
    try:
      builder = GeneratedJpegs(
        num_train=num_train,
        num_eval=num_eval,
        image_size=image_size,
        data_dir=data_dir,
        file_format=file_format,
      )
    finally:
      tempfile.tempdir = system_tmp
  builder.download_and_prepare()
  return str(builder.data_dir)
