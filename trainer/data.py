"""Data sources: synthetic, digits (offline default), cassava (TFDS), files.

Each source is a finite stream of cheap records (an index, a file name, the
encoded JPEG bytes) plus a `decode_fn` that turns a record into
`(image, label)` with float32 images in [0, 1]. `ctl.input` shuffles, shards
and skips the records deterministically and only then decodes, which is what
makes an exact, cheap resume possible.
"""

import dataclasses
import os
from typing import Callable

import numpy as np
import tensorflow as tf

from ctl.errors import UserError

DATASETS = ("synthetic", "digits", "cassava", "files")
_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


@dataclasses.dataclass(frozen=True)
class Source:
  """A dataset as the trainer needs it.

  Attributes:
    train_records: finite training records in a fixed order.
    num_train: number of training records.
    eval_records: finite validation records.
    decode_fn: record -> (float32 image in [0, 1], int64 label).
    num_classes: number of labels.
    image_shape: (height, width, 3) of a decoded image.
    shuffle_buffer: None for a full permutation per epoch; a number for
      sources too large to hold in memory as records.
  """
  train_records: tf.data.Dataset
  num_train: int
  eval_records: tf.data.Dataset
  decode_fn: Callable
  num_classes: int
  image_shape: tuple[int, int, int]
  shuffle_buffer: int | None = None


def load(name: str, *, image_size: int, data_dir: str = "") -> Source:
  """Loads a source by name.

  Args:
    name: one of DATASETS.
    image_size: side of the square images the model sees.
    data_dir: TFDS data directory (cassava) or image root (files).

  Returns:
    The `Source`.

  Raises:
    UserError: unknown name, or the data is not where it should be.
  """
  if image_size < 8:
    raise UserError(f"--image_size must be >= 8, got {image_size}.")
  if name == "synthetic":
    return _synthetic(image_size)
  if name == "digits":
    return _digits(image_size)
  if name == "cassava":
    return _cassava(image_size, data_dir)
  if name == "files":
    return _files(image_size, data_dir)
  raise UserError(
      f"Unknown dataset {name!r}; choose one of {', '.join(DATASETS)}.")


def _synthetic(image_size: int, num_classes: int = 5) -> Source:
  """Fixed random images, for benchmarks: decoding costs nothing."""
  bank = tf.constant(np.random.RandomState(0).uniform(
      size=(16, image_size, image_size, 3)).astype(np.float32))

  def decode(index):
    return bank[index % 16], index % num_classes

  return Source(train_records=tf.data.Dataset.range(4096), num_train=4096,
                eval_records=tf.data.Dataset.range(256), decode_fn=decode,
                num_classes=num_classes,
                image_shape=(image_size, image_size, 3))


def _digits(image_size: int) -> Source:
  """scikit-learn's 1,797 real 8x8 handwritten digits (shipped in the wheel).

  A fixed 80/20 train/validation split (seeded permutation, independent of
  --seed, so every run validates on the same 359 images).
  """
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  images = (digits.images / 16.0).astype(np.float32)[..., None]
  labels = digits.target.astype(np.int64)
  order = np.random.RandomState(0).permutation(len(labels))
  num_eval = len(labels) // 5
  eval_idx, train_idx = order[:num_eval], order[num_eval:]

  def decode(image, label):
    image = tf.image.resize(image, (image_size, image_size))
    return tf.tile(image, [1, 1, 3]), label

  return Source(
      train_records=tf.data.Dataset.from_tensor_slices(
          (images[train_idx], labels[train_idx])),
      num_train=len(train_idx),
      eval_records=tf.data.Dataset.from_tensor_slices(
          (images[eval_idx], labels[eval_idx])),
      decode_fn=decode, num_classes=10,
      image_shape=(image_size, image_size, 3))


def _resize_and_scale(image, image_size):
  """The codelab's preprocessing: resize, then scale to [0, 1]."""
  image = tf.image.resize(image, (image_size, image_size))
  return tf.cast(image, tf.float32) / 255.0


def _decode_encoded(image_size):
  def decode(encoded, label):
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    return _resize_and_scale(image, image_size), tf.cast(label, tf.int64)
  return decode


def _cassava(image_size: int, data_dir: str) -> Source:
  """TFDS cassava, records are the still-encoded JPEG bytes."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  if not data_dir:
    raise UserError("--dataset=cassava needs --data_dir, the TFDS data "
                    "directory that holds cassava.")
  try:
    splits, info = tfds.load(
        "cassava", split=["train", "validation"], data_dir=data_dir,
        download=False, as_supervised=True, with_info=True,
        shuffle_files=False,
        decoders={"image": tfds.decode.SkipDecoding()})
  except Exception as e:  # TFDS raises several types for missing data.
    raise UserError(
        f"cassava is not prepared in --data_dir={data_dir} "
        f"({type(e).__name__}); run `tfds build cassava --data_dir="
        f"{data_dir}` on a machine with network access first.") from None
  train, validation = splits
  num_train = int(train.cardinality())
  if num_train < 0:
    num_train = info.splits["train"].num_examples
  return Source(train_records=train, num_train=num_train,
                eval_records=validation,
                decode_fn=_decode_encoded(image_size),
                num_classes=info.features["label"].num_classes,
                image_shape=(image_size, image_size, 3), shuffle_buffer=1024)


def _files(image_size: int, data_dir: str) -> Source:
  """A directory of `class_name/*.jpg|png`; every 10th file validates."""
  if not data_dir or not os.path.isdir(data_dir):
    raise UserError(f"--data_dir={data_dir!r} is not a directory of "
                    "class_name/*.jpg|png images.")
  classes = sorted(d for d in os.listdir(data_dir)
                   if os.path.isdir(os.path.join(data_dir, d)))
  paths, labels = [], []
  for label, name in enumerate(classes):
    for file in sorted(os.listdir(os.path.join(data_dir, name))):
      if file.lower().endswith(_IMAGE_EXTENSIONS):
        paths.append(os.path.join(data_dir, name, file))
        labels.append(label)
  if len(classes) < 2 or not paths:
    raise UserError(f"--data_dir={data_dir} must hold at least two class "
                    "directories with .jpg or .png images.")
  paths, labels = np.array(paths), np.array(labels, np.int64)
  is_eval = np.arange(len(paths)) % 10 == 9
  decode_encoded = _decode_encoded(image_size)

  def decode(path, label):
    return decode_encoded(tf.io.read_file(path), label)

  return Source(
      train_records=tf.data.Dataset.from_tensor_slices(
          (paths[~is_eval], labels[~is_eval])),
      num_train=int(np.sum(~is_eval)),
      eval_records=tf.data.Dataset.from_tensor_slices(
          (paths[is_eval], labels[is_eval])),
      decode_fn=decode, num_classes=len(classes),
      image_shape=(image_size, image_size, 3))
