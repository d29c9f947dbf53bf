"""Data sources: synthetic, digits (offline default), cassava (TFDS), files.

Each source is a finite set of cheap records (an index, a file name, the
encoded JPEG bytes) plus a `decode_fn` that turns a record into
`(image, label)` with float32 images in [0, 1]. `ctl.data.input` picks each
worker's records for a step deterministically and only then decodes, which is
what makes an exact, cheap resume possible. Every source is read by index
(`ctl.data.input.IndexedRecords`) except a TFDS dataset prepared only as TFRecord,
which is streamed.

Every function here that tf.data traces is graph code already (`tf.cond`, no
Python branch on a tensor), so none is handed to AutoGraph: a conversion costs
each start of a worker and writes the converted source to a file in the
temporary directory that only a normal exit removes (a SIGKILLed or
preempted worker left one there at every kill). A TFDS dataset streamed from
TFRecord is read through TFDS's own functions, which it converts.
"""

from collections.abc import Callable
import dataclasses
import os
import posixpath
import re

from absl import logging
import numpy as np
import tensorflow as tf

from ctl import UserError
from ctl.data import datafiles
from ctl.data import input as input_lib

DATASETS = ("synthetic", "digits", "cassava", "files")
_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
_EVAL_EVERY = 10  # files: every 10th file (by sorted name) validates.
# files: images over this many pixels are skipped, read from their headers.
# PIL's limit: the float32 RGB copy that resizing makes is 1 GiB.
MAX_IMAGE_PIXELS = 89_478_485
_PNG_START = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"  # Signature, IHDR.

Records = input_lib.IndexedRecords | tf.data.Dataset


@dataclasses.dataclass(frozen=True)
class Source:
  """A dataset as the trainer needs it.

  Attributes:
    train_records: training records, read by index or streamed in a fixed
      order.
    num_train: number of training records.
    eval_records: validation records.
    decode_fn: record -> (float32 image in [0, 1], int64 label).
    num_classes: number of labels.
    image_shape: (height, width, 3) of a decoded image.
    shuffle_buffer: streamed sources only: records shuffled together.
  """

  train_records: Records
  num_train: int
  eval_records: Records
  decode_fn: Callable
  num_classes: int
  image_shape: tuple[int, int, int]
  shuffle_buffer: int | None = None

  def train_dataset(
    self,
    *,
    global_batch_size: int,
    input_context: tf.distribute.InputContext | None = None,
    seed: int = 0,
    start_step: int = 0,
  ) -> tf.data.Dataset:
    """`ctl.data.input.train_dataset` of these records, as the trainer reads them.

    `input_context`: whose share to read; None reads it all (one worker).
    """
    return input_lib.train_dataset(
      records=self.train_records,
      num_records=self.num_train,
      decode_fn=self.decode_fn,
      input_context=input_context or tf.distribute.InputContext(),
      global_batch_size=global_batch_size,
      seed=seed,
      start_step=start_step,
      shuffle_buffer=self.shuffle_buffer,
    )


def load(
  name: str,
  *,
  image_size: int,
  data_dir: str = "",
  storage: str = "auto",
  fuse_root: str = "/gcs",
  manifest_dir: str = "",
  is_chief: bool = True,
  skip_bad_images: bool = False,
  max_image_pixels: int = MAX_IMAGE_PIXELS,
  beat: datafiles.Beat = datafiles.no_beat,
) -> Source:
  """Loads a source by name.

  Args:
    name: one of DATASETS.
    image_size: side of the square images the model sees.
    data_dir: TFDS data directory (cassava) or image root (files); local,
      FUSE_ROOT/BUCKET/PATH or gs://.
    storage: the Cloud Storage route of both directories (`ctl.io.storage`).
    fuse_root: where buckets are mounted.
    manifest_dir: files only: where the file list is kept across restarts
      (the checkpoint directory); empty lists the files every time.
    is_chief: files only: this process writes the manifest.
    skip_bad_images: files only: leave out files that cannot be decoded
      (counted and logged) rather than stop with a user error.
    max_image_pixels: files only: skip images over this many pixels; 0: none.
    beat: files only: told of each directory listed and file read (a stall
      watchdog's progress).

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
    return _files(
      image_size,
      data_dir,
      storage=storage,
      fuse_root=fuse_root,
      manifest_dir=manifest_dir,
      is_chief=is_chief,
      skip_bad_images=skip_bad_images,
      max_image_pixels=max_image_pixels,
      beat=beat,
    )
  raise UserError(
    f"Unknown dataset {name!r}; choose one of {', '.join(DATASETS)}."
  )


def _synthetic(image_size: int, num_classes: int = 5) -> Source:
  """Fixed random images, for benchmarks: decoding costs nothing."""
  bank = tf.constant(
    np.random.RandomState(0)
    .uniform(size=(16, image_size, image_size, 3))
    .astype(np.float32)
  )

  @tf.autograph.experimental.do_not_convert
  def decode(index):
    return bank[index % 16], index % num_classes

  return Source(
    train_records=_in_memory(np.arange(4096)),
    num_train=4096,
    eval_records=_in_memory(np.arange(256)),
    decode_fn=decode,
    num_classes=num_classes,
    image_shape=(image_size, image_size, 3),
  )


def _digits(image_size: int) -> Source:
  """1,797 real 8x8 handwritten digits (UCI's, as scikit-learn ships them).

  A fixed 80/20 train/validation split (seeded permutation, independent of
  --seed, so every run validates on the same 359 images).
  """
  pixels, labels = _digits_arrays()
  images = (pixels / 16.0).astype(np.float32)[..., None]
  order = np.random.RandomState(0).permutation(len(labels))
  num_eval = len(labels) // 5
  eval_idx, train_idx = order[:num_eval], order[num_eval:]

  @tf.autograph.experimental.do_not_convert
  def decode(image, label):
    image = tf.image.resize(image, (image_size, image_size))
    return tf.tile(image, [1, 1, 3]), label

  return Source(
    train_records=_in_memory((images[train_idx], labels[train_idx])),
    num_train=len(train_idx),
    eval_records=_in_memory((images[eval_idx], labels[eval_idx])),
    decode_fn=decode,
    num_classes=10,
    image_shape=(image_size, image_size, 3),
  )


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
  """The 1,797 digits as `sklearn.datasets.load_digits` gives them.

  Read from `bundled_data/digits.csv.gz` beside this module: scikit-learn's
  own file (64 pixels and the label per row; its README names the source
  and the license), shipped here so the offline quick start needs no
  scikit-learn, which Keras imports wherever it is installed (about 1.2 s of
  CPU at every start of a worker).

  Returns:
    The 8x8 images (values 0..16) and their int64 labels.
  """
  rows = np.loadtxt(
    os.path.join(os.path.dirname(__file__), "bundled_data", "digits.csv.gz"),
    delimiter=",",
  )
  return rows[:, :-1].reshape(-1, 8, 8), rows[:, -1].astype(np.int64)


def _resize_and_scale(image, image_size):
  """The codelab's preprocessing: resize, then scale to [0, 1]."""
  image = tf.image.resize(image, (image_size, image_size))
  return tf.cast(image, tf.float32) / 255.0


def _decode_encoded(image_size):
  @tf.autograph.experimental.do_not_convert
  def decode(encoded, label):
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    return _resize_and_scale(image, image_size), tf.cast(label, tf.int64)

  return decode


def _cassava(image_size: int, data_dir: str) -> Source:
  """TFDS cassava (or any prepared TFDS image dataset), kept encoded.

  ArrayRecord is read by index: the records are the serialized examples,
  parsed and decoded in tf.data. A dataset prepared only as TFRecord is
  streamed.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  if not data_dir:
    raise UserError(
      "--dataset=cassava needs --data_dir, the TFDS data "
      "directory that holds cassava."
    )
  builder = tfds.builder_from_directory(_tfds_dataset_dir(data_dir))
  info = builder.info
  image_key, label_key = info.supervised_keys
  keep_encoded = {image_key: tfds.decode.SkipDecoding()}
  decode_encoded = _decode_encoded(image_size)
  common = dict(
    num_classes=info.features[label_key].num_classes,
    image_shape=(image_size, image_size, 3),
  )
  if info.available_file_formats() & set(
    tfds.core.FileFormat.with_random_access()
  ):
    train, validation = (
      input_lib.IndexedRecords.from_source(split)
      for split in builder.as_data_source(
        split=["train", "validation"],
        deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES,
      )
    )

    @tf.autograph.experimental.do_not_convert
    def decode(serialized):
      example = info.features.deserialize_example(
        serialized, decoders=keep_encoded
      )
      return decode_encoded(example[image_key], example[label_key])

    return Source(
      train_records=train,
      num_train=train.size,
      eval_records=validation,
      decode_fn=decode,
      **common,
    )
  return _streamed_tfds(builder, keep_encoded, decode_encoded, common)


def _streamed_tfds(builder, keep_encoded, decode_fn, common) -> Source:
  """A TFDS dataset without random access (TFRecord), streamed, said once."""
  info = builder.info
  logging.info(
    "%s is stored as %s, so it is streamed: every worker reads all of it "
    "each epoch and a resume reads up to its position; convert it once to "
    "read only each worker's share: tfds convert_format "
    "--dataset_version_dir=%s --out_file_format=array_record.",
    info.full_name,
    info.file_format.value,
    builder.data_dir,
  )
  train, validation = builder.as_dataset(
    split=["train", "validation"],
    as_supervised=True,
    shuffle_files=False,
    decoders=keep_encoded,
  )
  return Source(
    train_records=train,
    num_train=info.splits["train"].num_examples,
    eval_records=validation,
    decode_fn=decode_fn,
    shuffle_buffer=1024,
    **common,
  )


def _tfds_dataset_dir(data_dir: str) -> str:
  """DATA_DIR/cassava/<newest version>, or DATA_DIR if it is a prepared one."""
  if tf.io.gfile.exists(posixpath.join(data_dir, "dataset_info.json")):
    return data_dir
  found = tf.io.gfile.glob(
    posixpath.join(data_dir, "cassava", "*", "dataset_info.json")
  )
  versions = [
    posixpath.dirname(path)
    for path in found
    if re.fullmatch(
      r"\d+\.\d+\.\d+", posixpath.basename(posixpath.dirname(path))
    )
  ]
  if not versions:
    raise UserError(
      f"cassava is not prepared in --data_dir={data_dir}; run `tfds build "
      f"cassava --data_dir={data_dir} --file_format=array_record` on a "
      "machine with network access first."
    )
  return max(
    versions,
    key=lambda path: [
      int(part) for part in posixpath.basename(path).split(".")
    ],
  )


def _classes(names: list[str], *, data_dir: str, usage: str) -> list[str]:
  """The class names of `names` (`class_name/file`), sorted.

  Raises:
    UserError: fewer than two classes, or too few images to hold out a
      validation split (no metric may come from an empty evaluation).
  """
  classes = sorted({name.split("/")[0] for name in names})
  if len(classes) < 2:
    raise UserError(usage)
  if len(names) < _EVAL_EVERY:
    raise UserError(
      f"--data_dir={data_dir} holds {len(names)} images: too few to hold "
      f"out every {_EVAL_EVERY}th for validation; add images (at least "
      f"{_EVAL_EVERY})."
    )
  return classes


def _files(
  image_size: int,
  data_dir: str,
  *,
  storage: str,
  fuse_root: str,
  manifest_dir: str,
  is_chief: bool,
  skip_bad_images: bool,
  max_image_pixels: int,
  beat: datafiles.Beat,
) -> Source:
  """A directory of `class_name/*.jpg|png`; every 10th file validates."""
  usage = (
    f"--data_dir={data_dir!r} is not a directory of "
    "class_name/*.jpg|png images with at least two classes."
  )
  if not data_dir:
    raise UserError(usage)
  files = datafiles.open_files(data_dir, storage=storage, fuse_root=fuse_root)
  manifest = (
    datafiles.open_files(manifest_dir, storage=storage, fuse_root=fuse_root)
    if manifest_dir
    else None
  )
  names = datafiles.load_manifest(files, manifest_dir=manifest)
  fresh = names is None
  if fresh:
    listed = files.list(beat)
    names = _decodable(
      files,
      _image_names(listed),
      image_size=image_size,
      skip=skip_bad_images,
      max_pixels=max_image_pixels,
      beat=beat,
    )
    _check_no_class_left_out(files, listed=listed, names=names)
  classes = _classes(names, data_dir=data_dir, usage=usage)
  if fresh and manifest and is_chief:
    datafiles.save_manifest(files, manifest_dir=manifest, names=names)
  labels = np.array(
    [classes.index(name.split("/")[0]) for name in names], np.int64
  )
  is_eval = np.arange(len(names)) % _EVAL_EVERY == _EVAL_EVERY - 1

  def split(mask):
    return _file_records(
      files, [n for n, m in zip(names, mask) if m], labels[mask]
    )

  train, read = split(~is_eval)
  return Source(
    train_records=train,
    num_train=train.size,
    eval_records=split(is_eval)[0],
    decode_fn=_read_then_decode(read, image_size),
    num_classes=len(classes),
    image_shape=(image_size, image_size, 3),
  )


def _image_names(listed: list[str]) -> list[str]:
  """The `class_name/file` names of the images among the `listed` files."""
  return [
    name
    for name in listed
    if name.count("/") == 1 and name.lower().endswith(_IMAGE_EXTENSIONS)
  ]


def _check_no_class_left_out(
  files: datafiles.Files, *, listed: list[str], names: list[str]
) -> None:
  """Every directory at the top of `files` that holds files is a class.

  Args:
    files: the data directory.
    listed: every file under it.
    names: the images the run will use (`class_name/file`).

  Raises:
    UserError: a top directory keeps no image in `names` (none directly in
      it, or each one skipped): its class would vanish and every later label
      would shift.
  """
  kept = {name.split("/")[0] for name in names}
  lost = sorted({name.split("/")[0] for name in listed if "/" in name} - kept)
  if not lost:
    return
  where = posixpath.join(files.url, lost[0])  # As the user named it.
  if len(lost) == 1:
    what = f"{where} holds no image that can be used directly in it, so its "
    what += "class would be left out: add .jpg or .png images to it, or move it"
  else:
    what = (
      f"{where} and {len(lost) - 1} more directories hold no image that can "
      "be used directly in them, so their classes would be left out: add "
      ".jpg or .png images to them, or move them"
    )
  raise UserError(f"{what} out of --data_dir={files.url}.")


def _file_records(files: datafiles.Files, names: list[str], labels: np.ndarray):
  """(records of `names` with `labels`, record -> (file bytes, label))."""
  if files.in_graph:
    paths = np.array([files.path(name) for name in names], dtype=str)
    return _in_memory((paths, labels)), lambda path, label: (
      tf.io.read_file(path),
      label,
    )
  contents = files.records(names)
  chosen = tf.constant(labels)
  return input_lib.IndexedRecords(
    size=contents.size,
    fetch=lambda i: (contents.fetch(i), tf.gather(chosen, i)),
  ), lambda encoded, label: (encoded, label)


def _read_then_decode(read: Callable, image_size: int) -> Callable:
  """record -> (image, label): the bytes `read` gives, decoded and resized."""
  decode_encoded = _decode_encoded(image_size)
  return tf.autograph.experimental.do_not_convert(
    lambda *record: decode_encoded(*read(*record))
  )


def _header_pixels(encoded: tf.Tensor) -> tf.Tensor:
  """Width x height named by a PNG's or JPEG's header; -1 for other content.

  Nothing is decoded: a PNG names its size in its first chunk (IHDR, bytes
  16-24, big-endian), a JPEG in its frame header (`tf.io.extract_jpeg_shape`
  reads only the header). A 20000x20000 PNG of one color is a few KB on disk.
  """

  def png():
    size = tf.io.decode_raw(
      tf.strings.substr(encoded, 16, 8), tf.int32, little_endian=False
    )
    return tf.cast(size[0], tf.int64) * tf.cast(size[1], tf.int64)

  def jpeg():
    shape = tf.cast(tf.io.extract_jpeg_shape(encoded), tf.int64)
    return shape[0] * shape[1]

  is_png = tf.logical_and(
    tf.strings.length(encoded) >= 24,
    tf.strings.substr(encoded, 0, 16) == _PNG_START,
  )
  return tf.cond(
    is_png,
    png,
    lambda: tf.cond(
      tf.io.is_jpeg(encoded), jpeg, lambda: tf.constant(-1, tf.int64)
    ),
  )


def _decodable(
  files: datafiles.Files,
  names: list[str],
  *,
  image_size: int,
  skip: bool,
  max_pixels: int,
  beat: datafiles.Beat,
) -> list[str]:
  """`names` less the files that cannot be decoded as images or are too big.

  One parallel tf.data pass reads and decodes every file, as training will,
  when the file list is made (the first start; the manifest keeps the result
  for restarts; every worker that makes it gets the same), so a bad file
  stops the run before anything is written, or is left out of the fixed
  order that an exact resume depends on. It costs about what one epoch's
  decoding does. An image of more than `max_pixels` pixels (its header says)
  is not decoded but left out, said in one warning.

  Raises:
    UserError: a file cannot be decoded and `skip` is False.
  """
  good, oversized = _decoded_indices(
    files, names, image_size=image_size, max_pixels=max_pixels, beat=beat
  )
  _say_oversized(files, names, oversized, max_pixels=max_pixels)
  bad = [
    name
    for index, name in enumerate(names)
    if index not in good and index not in oversized
  ]
  if not bad:
    return [name for index, name in enumerate(names) if index in good]
  if not skip:
    where = posixpath.join(files.url, bad[0])  # As the user named it.
    what = (
      f"{where} cannot be decoded as an image"
      if len(bad) == 1
      else f"{where} and {len(bad) - 1} more files cannot be decoded as images"
    )
    them = "it" if len(bad) == 1 else "them"
    raise UserError(
      f"{what} ({len(bad)} of the {len(names)} files); remove {them}, or "
      f"pass --skip_bad_images to train without {them}."
    )
  logging.warning(
    "Skipped %d of the %d files under %s: they cannot be decoded as "
    "images: %s%s.",
    len(bad),
    len(names),
    files.url,
    ", ".join(bad[:5]),
    ", ..." if len(bad) > 5 else "",
  )
  return [name for index, name in enumerate(names) if index in good]


def _say_oversized(
  files: datafiles.Files,
  names: list[str],
  oversized: dict[int, int],
  *,
  max_pixels: int,
) -> None:
  """One warning for the images left out for their size, if any."""
  if not oversized:
    return
  first = min(oversized)
  more = len(oversized) - 1
  logging.warning(
    "Skipped %d of the %d files under %s: over the limit of %s pixels an "
    "image (--max_image_pixels): %s (%s pixels)%s.",
    len(oversized),
    len(names),
    files.url,
    f"{max_pixels:,}",
    names[first],
    f"{oversized[first]:,}",
    f" and {more} more" if more else "",
  )


def _check_one(read, decode_encoded, max_pixels: int):
  """(index, record) -> (index, pixels, decoded maximum), decoding only when
  the header says the image is within `max_pixels` (0: no limit)."""

  @tf.autograph.experimental.do_not_convert
  def check(index, record):
    encoded, label = read(*record)
    pixels = _header_pixels(encoded)
    fits = tf.logical_or(max_pixels <= 0, pixels <= max_pixels)
    decoded = tf.cond(
      fits,
      lambda: tf.reduce_max(decode_encoded(encoded, label)[0]),
      lambda: tf.constant(0.0),
    )
    return index, pixels, decoded

  return check


def _decoded_indices(
  files: datafiles.Files,
  names: list[str],
  *,
  image_size: int,
  max_pixels: int,
  beat: datafiles.Beat,
) -> tuple[set[int], dict[int, int]]:
  """Which of `names` decode as images, which are too big (one tf.data pass).

  Each file that comes out of the pass is a beat that names the first file
  not out yet: the one a stuck read is on, once every other file is out.

  Returns:
    The indices of the files that decode within `max_pixels`, and the pixels
    of each file over it (by index; such a file is not decoded).
  """
  records, read = _file_records(files, names, np.zeros(len(names), np.int64))
  check = _check_one(read, _decode_encoded(image_size), max_pixels)
  good, oversized = set(), {}

  def sort(index, pixels):
    if 0 < max_pixels < pixels:
      oversized[int(index)] = int(pixels)
    else:
      good.add(int(index))

  checked = (
    tf.data.Dataset.range(len(names))
    .batch(64)
    .map(
      tf.autograph.experimental.do_not_convert(
        lambda indices: (indices, records.fetch(indices))
      ),
      num_parallel_calls=tf.data.AUTOTUNE,
    )
    .unbatch()
    .map(check, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
  )
  waiting = _Waiting(files, names)
  for index, pixels, _ in checked.ignore_errors(
    log_warning=False
  ).as_numpy_iterator():
    sort(index, pixels)
    beat(waiting.done(int(index)))
  # ignore_errors also drops a batch whose read failed: each file it dropped
  # is read again alone and checked, and only a decode error makes it bad.
  for index in sorted(set(range(len(names))) - good - set(oversized)):
    beat(f"reading {files.path(names[index])}")
    record = tf.nest.map_structure(
      lambda t: t[0], records.fetch(tf.constant([index], tf.int64))
    )
    try:
      sort(index, check(index, record)[1])
    except tf.errors.InvalidArgumentError:
      pass
  return good, oversized


class _Waiting:
  """Which files of a pass have not come out yet, to name in a beat."""

  def __init__(self, files: datafiles.Files, names: list[str]):
    self._files = files
    self._names = names
    self._out = [False] * len(names)
    self._first = 0  # No file before it is waiting.
    self._left = len(names)

  def done(self, index: int) -> str:
    """Marks `index` out; says what the pass now waits for."""
    self._out[index] = True
    self._left -= 1
    while self._first < len(self._out) and self._out[self._first]:
      self._first += 1
    if not self._left:
      return f"done reading {len(self._names)} files"
    first = self._files.path(self._names[self._first])
    others = self._left - 1
    return f"reading {first}" + (
      f" or one of {others} other files" if others else ""
    )


def _in_memory(arrays) -> input_lib.IndexedRecords:
  return input_lib.IndexedRecords.from_tensors(arrays)
