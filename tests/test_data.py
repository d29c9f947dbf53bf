"""trainer.data: each source yields cheap records that decode to images."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from ctl import input as input_lib
from ctl.errors import UserError
from trainer import data


def _decoded(source, records, count=None):
  dataset = records.map(source.decode_fn)
  if count:
    dataset = dataset.take(count)
  return list(dataset.as_numpy_iterator())


def _check_images(pairs, source):
  for image, label in pairs:
    assert image.shape == source.image_shape
    assert image.dtype == np.float32
    assert 0.0 <= image.min() <= image.max() <= 1.0
    assert 0 <= label < source.num_classes
    assert np.issubdtype(np.asarray(label).dtype, np.integer)


def test_cassava_records_stay_encoded_until_decode_fn(tmp_path):
  with tfds.testing.mock_data(num_examples=6):
    source = data.load("cassava", image_size=300, data_dir=str(tmp_path))
    records = list(source.train_records.take(3).as_numpy_iterator())
    pairs = _decoded(source, source.train_records, count=3)
    eval_pairs = _decoded(source, source.eval_records, count=2)
  assert source.num_train == 6
  assert source.num_classes == 5
  assert source.image_shape == (300, 300, 3)
  assert source.shuffle_buffer  # Streamed: shuffled in blocks.
  for encoded, label in records:
    assert isinstance(encoded, bytes)
    # Still an image file (the mock encodes PNG; the real data is JPEG).
    assert encoded.startswith((b"\x89PNG", b"\xff\xd8")), encoded[:8]
    assert 0 <= label < 5
  _check_images(pairs + eval_pairs, source)
  assert [label for _, label in pairs] == [label for _, label in records]
  assert pairs[0][0].std() > 0  # A real (random) picture, not a blank.


def test_cassava_through_the_resumable_pipeline(tmp_path):
  with tfds.testing.mock_data(num_examples=8):
    source = data.load("cassava", image_size=300, data_dir=str(tmp_path))
    dataset = input_lib.train_dataset(
        records=source.train_records, num_records=source.num_train,
        decode_fn=source.decode_fn,
        input_context=tf.distribute.InputContext(),
        global_batch_size=4, seed=0, start_step=1,
        shuffle_buffer=source.shuffle_buffer)
    images, labels = next(iter(dataset))
  assert images.shape == (4, 300, 300, 3) and images.dtype == tf.float32
  assert labels.dtype == tf.int64


def test_cassava_without_data_dir_is_a_user_error():
  with pytest.raises(UserError, match="--data_dir"):
    data.load("cassava", image_size=300, data_dir="")


def _write_image(path, color, size, channels):
  pixels = np.empty((size[0], size[1], channels), np.uint8)
  pixels[...] = color[:channels]
  if path.endswith(".png"):
    encoded = tf.io.encode_png(pixels)
  else:
    encoded = tf.io.encode_jpeg(pixels)
  tf.io.write_file(path, encoded)


# Class 0 is red, class 1 is blue; grayscale and RGBA files are in the mix.
_COLORS = {"a_red": (255, 0, 0, 255), "b_blue": (0, 0, 255, 255)}


@pytest.fixture
def image_root(tmp_path):
  root = tmp_path / "images"
  for index in range(13):
    name = "a_red" if index < 7 else "b_blue"
    (root / name).mkdir(parents=True, exist_ok=True)
    extension = ".png" if index % 2 else ".jpg"
    channels = 4 if index == 3 else 3
    _write_image(str(root / name / f"{index:02d}{extension}"),
                 _COLORS[name], (20 + index, 30), channels)
  _write_image(str(root / "a_red" / "gray.PNG"), (128,), (9, 9), 1)
  (root / "a_red" / "notes.txt").write_text("not an image")
  (root / "stray.jpg").write_bytes(b"")  # Not in a class directory.
  return str(root)


def test_files_decode_with_labels_and_hold_out_every_tenth(image_root):
  source = data.load("files", image_size=16, data_dir=image_root)
  files = [os.path.join(image_root, c, f) for c in sorted(_COLORS)
           for f in sorted(os.listdir(os.path.join(image_root, c)))
           if not f.endswith(".txt")]
  assert len(files) == 14
  train = [p.decode() for p, _ in source.train_records.as_numpy_iterator()]
  held_out = [p.decode() for p, _ in source.eval_records.as_numpy_iterator()]
  assert held_out == [files[9]]
  assert train == files[:9] + files[10:]
  assert source.num_train == 13 and source.num_classes == 2

  for records in (source.train_records, source.eval_records):
    for (path, label), (image, decoded_label) in zip(
        records.as_numpy_iterator(), _decoded(source, records)):
      assert decoded_label == label
      assert image.shape == (16, 16, 3) and image.dtype == np.float32
      red, _, blue = image.reshape(-1, 3).mean(axis=0)
      if b"gray" in path:
        assert label == 0
        np.testing.assert_allclose(image, 128 / 255, atol=0.01)
      elif label == 0:
        assert red > 0.9 and blue < 0.1, path
      else:
        assert label == 1 and blue > 0.9 and red < 0.1, path


@pytest.mark.parametrize("layout", ["missing", "one_class", "no_images"])
def test_files_without_two_classes_of_images_is_a_user_error(tmp_path, layout):
  root = tmp_path / "root"
  if layout != "missing":
    (root / "cats").mkdir(parents=True)
    if layout == "one_class":
      _write_image(str(root / "cats" / "1.png"), (1, 2, 3), (8, 8), 3)
    else:
      (root / "dogs").mkdir()
  with pytest.raises(UserError, match="--data_dir="):
    data.load("files", image_size=16, data_dir=str(root))


def _digit_split(seed):
  np.random.seed(seed)
  tf.random.set_seed(seed)
  source = data.load("digits", image_size=8)
  return source, {
      name: sorted(image.tobytes() + bytes([label]) for image, label in
                   records.as_numpy_iterator())
      for name, records in (("train", source.train_records),
                            ("eval", source.eval_records))}


def test_digits_split_is_fixed_and_partitions_the_1797_digits():
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  source, first = _digit_split(seed=1)
  _, second = _digit_split(seed=2)
  assert first == second
  assert len(first["eval"]) == 1797 // 5 == 359
  assert source.num_train == len(first["train"]) == 1797 - 359
  digits = datasets.load_digits()
  everything = sorted(
      (image / 16.0).astype(np.float32)[..., None].tobytes() + bytes([label])
      for image, label in zip(digits.images, digits.target))
  assert sorted(first["train"] + first["eval"]) == everything
  assert source.num_classes == 10


def test_digits_decode_to_rgb_images_of_the_requested_size():
  source = data.load("digits", image_size=24)
  pairs = _decoded(source, source.eval_records, count=4)
  _check_images(pairs, source)
  image = pairs[0][0]
  assert image.shape == (24, 24, 3)
  np.testing.assert_array_equal(image[..., 0], image[..., 2])
  assert image.max() > 0.5


def test_synthetic_has_five_classes_and_fixed_images():
  source = data.load("synthetic", image_size=8)
  pairs = _decoded(source, source.train_records, count=20)
  _check_images(pairs, source)
  assert [label for _, label in pairs] == [i % 5 for i in range(20)]
  np.testing.assert_array_equal(pairs[0][0], pairs[16][0])
  assert not np.array_equal(pairs[0][0], pairs[1][0])


@pytest.mark.parametrize("name,image_size,match", [
    ("mnist", 32, "Unknown dataset 'mnist'"),
    ("digits", 4, "--image_size must be >= 8"),
])
def test_bad_names_and_sizes_are_user_errors(name, image_size, match):
  with pytest.raises(UserError, match=match):
    data.load(name, image_size=image_size)
