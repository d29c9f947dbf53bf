"""trainer.data: each source yields cheap records that decode to images."""

import logging
import os
import resource
import shutil
import struct
import sys
import tempfile
import zlib

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.workloads import tfds_jpegs
from ctl.data import datafiles
from ctl.data import input as input_lib
from ctl.errors import UserError
from ctl.testing.gcs_emulator import GcsEmulator
from tests.conftest import absl_messages
from trainer import data
from trainer.testing import FAST_FLAGS
from trainer.testing import read_summary
from trainer.testing import run_command
from trainer.testing import trainer_env


def _all_records(records):
  """Every record of a source, in its fixed order, as numpy values."""
  if isinstance(records, input_lib.IndexedRecords):
    fetched = records.fetch(tf.range(records.size, dtype=tf.int64))
    return list(tf.data.Dataset.from_tensor_slices(fetched).as_numpy_iterator())
  return list(records.as_numpy_iterator())


def _decoded(source, records, count=None):
  pairs = _all_records(records)[:count]
  return [
    tuple(
      np.asarray(t)
      for t in source.decode_fn(*(pair if isinstance(pair, tuple) else (pair,)))
    )
    for pair in pairs
  ]


def _check_images(pairs, source):
  for image, label in pairs:
    assert image.shape == source.image_shape
    assert image.dtype == np.float32
    assert 0.0 <= image.min() <= image.max() <= 1.0
    assert 0 <= label < source.num_classes
    assert np.issubdtype(np.asarray(label).dtype, np.integer)


@pytest.fixture(scope="module")
def tfds_dirs(tmp_path_factory):
  """A tiny TFDS JPEG dataset prepared offline, as ArrayRecord and TFRecord."""
  root = tmp_path_factory.mktemp("tfds")
  return {
    file_format: tfds_jpegs.build(
      str(root / file_format),
      file_format=file_format,
      num_train=24,
      num_eval=6,
      image_size=20,
    )
    for file_format in ("array_record", "tfrecord")
  }


def test_building_the_dataset_leaves_nothing_in_the_temporary_directory(
  tmp_path, monkeypatch
):
  # TFDS makes a directory there for every builder of a dataset not yet
  # prepared (to copy its metadata from the TFDS bucket) and never removes
  # it: one empty tmp*tfds directory in /tmp at every build.
  scratch = tmp_path / "tmp"
  scratch.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(scratch))
  tfds_jpegs.build(
    str(tmp_path / "data"),
    file_format="array_record",
    num_train=6,
    num_eval=3,
    image_size=8,
  )
  assert os.listdir(scratch) == []


def _class_of(image):
  """The class a generated JPEG was coloured with (see tfds_jpegs)."""
  return int(
    np.argmin(
      np.abs(tfds_jpegs.COLORS[:3] / 255 - image.reshape(-1, 3).mean(0)).sum(1)
    )
  )


def _first_batch(source, *, batch_size: int, start_step: int):
  """The first (images, labels) of `source`'s training input, one worker."""
  dataset = source.train_dataset(
    global_batch_size=batch_size, start_step=start_step
  )
  return next(iter(dataset))


def test_array_record_tfds_is_read_by_index_and_decoded_in_tf_data(tfds_dirs):
  source = data.load(
    "cassava", image_size=16, data_dir=tfds_dirs["array_record"]
  )
  assert isinstance(source.train_records, input_lib.IndexedRecords)
  assert (source.num_train, source.eval_records.size) == (24, 6)
  assert source.num_classes == 3 and source.shuffle_buffer is None
  serialized = _all_records(source.train_records)
  assert all(isinstance(record, bytes) for record in serialized)
  pairs = _decoded(source, source.train_records)
  _check_images(pairs + _decoded(source, source.eval_records), source)
  assert [_class_of(image) for image, _ in pairs] == [
    label for _, label in pairs
  ]


def test_tfrecord_tfds_is_streamed_and_says_how_to_convert(tfds_dirs):
  with absl_messages() as messages:
    source = data.load("cassava", image_size=16, data_dir=tfds_dirs["tfrecord"])
  assert isinstance(source.train_records, tf.data.Dataset)
  assert source.shuffle_buffer and source.num_train == 24
  text = "\n".join(messages)
  assert "tfds convert_format" in text
  assert "out_file_format=array_record" in text
  pairs = _decoded(source, source.train_records, count=6)
  _check_images(pairs, source)
  records = _all_records(source.train_records)[:6]
  assert all(encoded.startswith(b"\xff\xd8") for encoded, _ in records)


def test_cassava_is_found_by_name_in_a_tfds_data_dir(tfds_dirs, tmp_path):
  # DATA_DIR/cassava/<version>/, as `tfds build cassava` lays it out.
  shutil.copytree(tfds_dirs["array_record"], tmp_path / "cassava" / "1.0.0")
  source = data.load("cassava", image_size=16, data_dir=str(tmp_path))
  assert source.num_train == 24
  images, labels = _first_batch(source, batch_size=4, start_step=3)
  assert images.shape == (4, 16, 16, 3) and images.dtype == tf.float32
  assert labels.dtype == tf.int64


@pytest.mark.parametrize("data_dir", ["", "missing"])
def test_cassava_without_a_prepared_dataset_is_a_user_error(data_dir, tmp_path):
  with pytest.raises(UserError, match="--data_dir"):
    data.load(
      "cassava", image_size=300, data_dir=data_dir and str(tmp_path / data_dir)
    )


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


def _make_images(root):
  """13 JPEG/PNG images in two classes, plus files that are not images."""
  for index in range(13):
    name = "a_red" if index < 7 else "b_blue"
    (root / name).mkdir(parents=True, exist_ok=True)
    extension = ".png" if index % 2 else ".jpg"
    channels = 4 if index == 3 else 3
    _write_image(
      str(root / name / f"{index:02d}{extension}"),
      _COLORS[name],
      (20 + index, 30),
      channels,
    )
  _write_image(str(root / "a_red" / "gray.PNG"), (128,), (9, 9), 1)
  (root / "a_red" / "notes.txt").write_text("not an image")
  (root / "stray.jpg").write_bytes(b"")  # Not in a class directory.
  return str(root)


@pytest.fixture
def image_root(tmp_path):
  return _make_images(tmp_path / "images")


@pytest.mark.parametrize("name", ["synthetic", "digits", "cassava", "files"])
def test_no_source_writes_autograph_files_where_a_killed_worker_leaves_them(
  name, tfds_dirs, image_root, tmp_path, monkeypatch
):
  # AutoGraph writes each function it converts to a file in the temporary
  # directory, removed only at a normal exit: every SIGKILLed, preempted or
  # stalled worker left its decode in /tmp. The trainer's own functions are
  # graph code already, so nothing is converted (nor costs a start to do).
  # (A cassava streamed from TFRecord is read by TFDS's own functions, which
  # it converts.)
  data_dir = {"cassava": tfds_dirs["array_record"], "files": image_root}.get(
    name, ""
  )
  scratch = tmp_path / "tmp"
  scratch.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(scratch))
  source = data.load(name, image_size=16, data_dir=data_dir)
  _first_batch(source, batch_size=4, start_step=0)
  evaluation = input_lib.eval_dataset(
    records=source.eval_records,
    decode_fn=source.decode_fn,
    input_context=tf.distribute.InputContext(),
    global_batch_size=4,
  )
  next(iter(evaluation))
  assert [n for n in os.listdir(scratch) if "autograph" in n] == []


def _check_colors(pairs, names):
  for (image, label), name in zip(pairs, names):
    assert image.shape == (16, 16, 3) and image.dtype == np.float32
    red, _, blue = image.reshape(-1, 3).mean(axis=0)
    if "gray" in name:
      assert label == 0
      np.testing.assert_allclose(image, 128 / 255, atol=0.01)
    elif label == 0:
      assert red > 0.9 and blue < 0.1, name
    else:
      assert label == 1 and blue > 0.9 and red < 0.1, name


def test_files_decode_with_labels_and_hold_out_every_tenth(image_root):
  source = data.load("files", image_size=16, data_dir=image_root)
  files = [
    os.path.join(image_root, c, f)
    for c in sorted(_COLORS)
    for f in sorted(os.listdir(os.path.join(image_root, c)))
    if not f.endswith(".txt")
  ]
  assert len(files) == 14
  train = [p.decode() for p, _ in _all_records(source.train_records)]
  held_out = [p.decode() for p, _ in _all_records(source.eval_records)]
  assert held_out == [files[9]]
  assert train == files[:9] + files[10:]
  assert source.num_train == 13 and source.num_classes == 2
  for records, names in (
    (source.train_records, train),
    (source.eval_records, held_out),
  ):
    _check_colors(_decoded(source, records), names)


def _add_image(write, name):
  """A new red image whose name sorts first: it would shift every index."""
  write(name, tf.io.encode_jpeg(np.full((8, 8, 3), 250, np.uint8)).numpy())


@pytest.mark.parametrize("form", ["mount_path", "gs_url"])
def test_files_on_a_fuse_mount_keep_their_manifest(tmp_path, form):
  fuse_root = tmp_path / "gcs"  # Stands in for /gcs, where buckets mount.
  root = _make_images(fuse_root / "bucket" / "images")
  data_dir = root if form == "mount_path" else "gs://bucket/images"

  def load(manifest_dir):
    return data.load(
      "files",
      image_size=16,
      data_dir=data_dir,
      fuse_root=str(fuse_root),
      manifest_dir=manifest_dir,
    )

  checkpoints = f"{fuse_root}/bucket/run/checkpoints"
  first = load(checkpoints)
  names = _all_records(first.train_records)
  assert os.path.exists(os.path.join(checkpoints, datafiles.MANIFEST))
  _add_image(
    lambda name, data: (fuse_root / "bucket" / "images" / name).write_bytes(
      data
    ),
    "a_red/000_added.jpg",
  )
  assert load(checkpoints).num_train == first.num_train
  assert _all_records(load(checkpoints).train_records) == names
  assert load("").num_train == first.num_train + 1  # Listed afresh.


@pytest.mark.processes
def test_files_on_cloud_storage_through_gcsfs(gcs_emulator, image_root):
  fs = gcs_emulator.filesystem()
  bucket = GcsEmulator.BUCKET
  fs.put(image_root, f"{bucket}/images", recursive=True)

  def load():
    return data.load(
      "files",
      image_size=16,
      data_dir=f"gs://{bucket}/images",
      storage="gcsfs",
      manifest_dir=f"gs://{bucket}/run/checkpoints",
    )

  source = load()
  local = data.load("files", image_size=16, data_dir=image_root)
  assert (source.num_train, source.num_classes) == (13, 2)
  pairs = _decoded(source, source.train_records)
  for (image, label), (local_image, local_label) in zip(
    pairs, _decoded(local, local.train_records)
  ):
    np.testing.assert_array_equal(image, local_image)
    assert label == local_label
  assert fs.exists(f"{bucket}/run/checkpoints/{datafiles.MANIFEST}")
  _add_image(
    lambda name, data: fs.pipe(f"{bucket}/images/{name}", data),
    "a_red/000_added.jpg",
  )
  again = load()
  assert again.num_train == 13
  images, labels = _first_batch(again, batch_size=13, start_step=0)
  assert sorted(labels.numpy().tolist()) == sorted(label for _, label in pairs)


def test_a_manifest_of_another_data_dir_is_a_user_error(tmp_path, image_root):
  other = _make_images(tmp_path / "other")
  checkpoints = str(tmp_path / "checkpoints")
  data.load(
    "files", image_size=16, data_dir=image_root, manifest_dir=checkpoints
  )
  with pytest.raises(UserError, match="lists the files of"):
    data.load("files", image_size=16, data_dir=other, manifest_dir=checkpoints)


@pytest.mark.parametrize("route", ["local", "gcsfs"])
@pytest.mark.processes
def test_undecodable_files_are_named_or_skipped_and_left_out_of_the_manifest(
  route, image_root, tmp_path, request, caplog
):
  root = tmp_path / "images"
  good = tf.io.encode_jpeg(np.full((20, 20, 3), 200, np.uint8)).numpy()
  (root / "a_red" / "0_garbage.png").write_bytes(b"\x89PNG not really")
  (root / "b_blue" / "truncated.jpg").write_bytes(good[: len(good) // 2])
  data_dir, checkpoints = image_root, str(tmp_path / "checkpoints")
  if route == "gcsfs":
    fs = request.getfixturevalue("gcs_emulator").filesystem()
    fs.put(image_root, f"{GcsEmulator.BUCKET}/images", recursive=True)
    data_dir = f"gs://{GcsEmulator.BUCKET}/images"
    checkpoints = f"gs://{GcsEmulator.BUCKET}/checkpoints"

  def load(skip):
    return data.load(
      "files",
      image_size=16,
      data_dir=data_dir,
      storage="gcsfs" if route == "gcsfs" else "auto",
      manifest_dir=checkpoints,
      skip_bad_images=skip,
    )

  first = "a_red/0_garbage.png"
  with pytest.raises(UserError) as error:
    load(skip=False)
  assert str(error.value).startswith(
    f"{data_dir}/{first} and 1 more files cannot be decoded "
    "as images (2 of the 16 files); remove them, or pass "
    "--skip_bad_images"
  )
  with caplog.at_level(logging.WARNING):
    source = load(skip=True)
  assert (source.num_train, source.num_classes) == (13, 2)
  assert (
    f"Skipped 2 of the 16 files under {data_dir}: they cannot be "
    f"decoded as images: {first}, b_blue/truncated.jpg." in caplog.text
  )
  # The manifest lists only the good files: a restart neither checks nor
  # skips again.
  assert _all_records(load(skip=False).train_records) == _all_records(
    source.train_records
  )


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


def _names_by_label(source, root):
  """{label: names relative to `root`} of every record, train and eval."""
  found = {}
  for records in (source.train_records, source.eval_records):
    for path, label in _all_records(records):
      name = os.path.relpath(path.decode(), root)
      found.setdefault(int(label), []).append(name)
  return found


def test_a_link_inside_a_class_to_another_class_removes_no_class(
  image_root, caplog
):
  # Each class links to the other from inside it: whichever the walk entered
  # first, its link led to the other class, which was then "already listed"
  # and vanished (trained on 2 of 3 classes, exit 0).
  os.symlink("../b_blue", os.path.join(image_root, "a_red", "blue"))
  os.symlink("../a_red", os.path.join(image_root, "b_blue", "red"))
  green = os.path.join(image_root, "c_green")
  os.mkdir(green)
  _write_image(os.path.join(green, "0.png"), (0, 255, 0), (8, 8), 3)
  os.symlink("../a_red/00.jpg", os.path.join(green, "red.jpg"))
  with caplog.at_level(logging.WARNING):
    source = data.load("files", image_size=16, data_dir=image_root)
  found = _names_by_label(source, image_root)
  assert source.num_classes == 3
  assert {label: len(names) for label, names in found.items()} == {
    0: 8,
    1: 6,
    2: 2,
  }
  # A file in two classes is an image of each, under its own name there.
  assert "a_red/00.jpg" in found[0] and "c_green/red.jpg" in found[2]
  assert (
    f"1 file under {image_root} is reached by more than one name (first: "
    "a_red/00.jpg is also c_green/red.jpg)" in caplog.text
  )


def _huge_png(path, side):
  """A valid side x side 1-bit grayscale PNG of zeros: a few KB on disk."""

  def chunk(kind, body):
    crc = zlib.crc32(kind + body)
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

  row = bytes(1 + (side + 7) // 8)  # The filter byte, then 8 pixels a byte.
  packer = zlib.compressobj(9)
  pixels = b"".join(packer.compress(row) for _ in range(side))
  with open(path, "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n")
    f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)))
    f.write(chunk(b"IDAT", pixels + packer.flush()))
    f.write(chunk(b"IEND", b""))


def test_an_image_over_the_pixel_limit_is_skipped_and_named_once(
  image_root, caplog
):
  # It was decoded: 3.1 GB peak RSS and 11x slower, without a word.
  huge = os.path.join(image_root, "b_blue", "huge.png")
  _huge_png(huge, 20000)
  assert os.path.getsize(huge) < 100_000

  def load(**limit):
    return data.load("files", image_size=16, data_dir=image_root, **limit)

  with caplog.at_level(logging.WARNING):
    source = load()
  [said] = [r.getMessage() for r in caplog.records if "pixel" in r.getMessage()]
  assert said == (
    f"Skipped 1 of the 15 files under {image_root}: over the limit of "
    "89,478,485 pixels an image (--max_image_pixels): b_blue/huge.png "
    "(400,000,000 pixels)."
  )
  found = _names_by_label(source, image_root)
  assert sum(map(len, found.values())) == 14
  assert "b_blue/huge.png" not in found[1]
  # The limit is read from PNG and JPEG headers: 30x30 keeps 20x30 to 30x30.
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    source = load(max_image_pixels=900)
  assert (
    "Skipped 3 of the 15 files under " in caplog.text
    and "(--max_image_pixels): b_blue/11.png (930 pixels) and 2 more"
    in caplog.text
  )
  assert sum(map(len, _names_by_label(source, image_root).values())) == 12


@pytest.mark.parametrize("layout", ["nested", "undecodable"])
def test_a_class_directory_without_a_usable_image_is_a_user_error(
  image_root, layout
):
  # It was left out silently: a class fewer, and every later label shifted.
  green = os.path.join(image_root, "c_green")
  os.makedirs(os.path.join(green, "more"))
  if layout == "nested":
    _write_image(os.path.join(green, "more", "0.png"), (0, 255, 0), (8, 8), 3)
  else:
    with open(os.path.join(green, "0.png"), "wb") as f:
      f.write(b"\x89PNG not really")
  with pytest.raises(UserError) as error:
    data.load("files", image_size=16, data_dir=image_root, skip_bad_images=True)
  assert str(error.value) == (
    f"{green} holds no image that can be used directly in it, so its class "
    "would be left out: add .jpg or .png images to it, or move it out of "
    f"--data_dir={image_root}."
  )


def _digit_split(seed):
  np.random.seed(seed)
  tf.random.set_seed(seed)
  source = data.load("digits", image_size=8)
  return source, {
    name: sorted(
      image.tobytes() + bytes([label]) for image, label in _all_records(records)
    )
    for name, records in (
      ("train", source.train_records),
      ("eval", source.eval_records),
    )
  }


def test_digits_split_is_fixed_and_partitions_the_1797_digits():
  source, first = _digit_split(seed=1)
  _, second = _digit_split(seed=2)
  assert first == second
  assert len(first["eval"]) == 1797 // 5 == 359
  assert source.num_train == len(first["train"]) == 1797 - 359
  images, labels = data._digits_arrays()  # pylint: disable=protected-access
  everything = sorted(
    (image / 16.0).astype(np.float32)[..., None].tobytes() + bytes([label])
    for image, label in zip(images, labels)
  )
  assert sorted(first["train"] + first["eval"]) == everything
  assert source.num_classes == 10


_LOADED_AT_EXIT = """
import atexit, ctypes, gc, resource, runpy, sys

def refaults():
  # Page faults to use a 16 MiB block again once freed (the third time):
  # none where malloc keeps freed memory, one a page where it gives it back.
  libc = ctypes.CDLL(None)
  libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
  libc.free.argtypes = [ctypes.c_void_p]
  for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(16 << 20)
    ctypes.memset(block, 1, 16 << 20)
    libc.free(block)
  return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

atexit.register(lambda: print(
  "refaults:", refaults(),
  "collector:", gc.isenabled(), gc.get_freeze_count(), "loaded:", *sorted(
  {name.split(".")[0] for name in sys.modules if sys.modules[name]}),
  file=sys.stderr))
sys.argv = ["trainer.task", *sys.argv[1:]]
runpy.run_module("trainer.task", run_name="__main__", alter_sys=True)
"""
# A 16 MiB block's pages.
_BLOCK_PAGES = (16 << 20) // resource.getpagesize()


@pytest.mark.processes
def test_a_digits_run_starts_without_unused_imports_or_collector_rounds(
  tmp_path,
):
  # Keras imports scikit-learn and matplotlib when they are installed (plot
  # galleries, estimator wrappers): 1.2 s of CPU at every start of a worker,
  # for nothing the trainer uses; and TensorFlow's own Keras 1 engine
  # imports SciPy (0.15 s) for sparse inputs that only that engine, which
  # the trainer never uses, takes. Neither is a dependency any more (the
  # digits ship in trainer/bundled_data/), so a user's environment stands in
  # for them here: a scikit-learn and a SciPy on the path that the trainer
  # must not import. And
  # the garbage collector walked the imports' objects about 1,000 times.
  # And glibc's malloc gave freed memory back to the system at once, to
  # fault it in again (how much that costs depends on the kernel: 300,000
  # page faults in a 40-step run, 1.3 s of CPU, on one machine of ours;
  # 112,000 on another), unless the user set malloc's terms themselves.
  installed = tmp_path / "site-packages"
  for package in ("sklearn", "scipy"):
    (installed / package).mkdir(parents=True)
    (installed / package / "__init__.py").write_text('__version__ = "1.9.1"\n')
  faults = {}
  for malloc in ("ctl's", "the user's"):
    model_dir = str(tmp_path / malloc)
    # glibc's default top pad, set: the trainer leaves malloc alone.
    env = trainer_env(
      **({"MALLOC_TOP_PAD_": "131072"} if malloc == "the user's" else {})
    )
    env["PYTHONPATH"] += os.pathsep + str(installed)
    result = run_command(
      [
        sys.executable,
        "-c",
        _LOADED_AT_EXIT,
        *FAST_FLAGS,
        "--train_steps=10",
        f"--model_dir={model_dir}",
      ],
      env=env,
    )
    at_exit = result.stderr.rsplit("refaults:", 1)[1]
    count, at_exit = at_exit.split("collector:")
    faults[malloc] = int(count)
    collector, loaded = at_exit.split("loaded:")
    loaded = set(loaded.split())
    assert {"keras", "tensorflow"} <= loaded
    assert not loaded & {"sklearn", "matplotlib", "scipy"}
    # The collector runs again after the imports, which it no longer walks.
    enabled, frozen = collector.split()
    assert enabled == "True" and int(frozen) > 100_000, collector
    assert read_summary(model_dir)["final_step"] == 10
  assert faults["ctl's"] < _BLOCK_PAGES // 4, faults
  assert faults["the user's"] > _BLOCK_PAGES * 3 // 4, faults


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


@pytest.mark.parametrize(
  "name,image_size,match",
  [
    ("mnist", 32, "Unknown dataset 'mnist'"),
    ("digits", 4, "--image_size must be >= 8"),
  ],
)
def test_bad_names_and_sizes_are_user_errors(name, image_size, match):
  with pytest.raises(UserError, match=match):
    data.load(name, image_size=image_size)
