"""Training files on local disk, a Cloud Storage FUSE mount, or gs://.

`open_files(url, ...)` lists the files under a directory through the same
routes as the job's outputs (see `ctl.io.storage`):

  local path, or FUSE_ROOT/BUCKET/PATH, or gs:// with the fuse route: plain
    files; tf.data reads them itself (`tf.io.read_file`, in parallel maps).
  gs:// with the tf route: TensorFlow's own gs:// filesystem, the same way.
  gs:// with the gcsfs route: read in batches with gcsfs (`cat` fetches a
    batch of objects concurrently), through `IndexedRecords.from_source`.

Listing a large bucket is slow and its content may change, so the trainer
saves the list once as a manifest (`MANIFEST`, next to the checkpoints; only
the chief writes it) and reads it back on every restart: files added later do
not move the order of a resumed job.
"""

import collections
from collections.abc import Callable, Sequence
import json
import os
import posixpath

from absl import logging
import tensorflow as tf

from ctl.data import input as input_lib
from ctl.errors import UserError
from ctl.io import storage as storage_lib

MANIFEST = "data_manifest.json"

# Told what comes next, once per directory listed or file read, so a stall
# watchdog counts each as progress and names the one a stuck call is on
# (`ctl.resilience.watchdog.Watchdog.beat`).
Beat = Callable[[str], None]


def no_beat(doing: str) -> None:
  del doing  # Nobody watches.


class Files:
  """The files under one directory, and how to read them.

  Attributes:
    url: the directory as the user named it.
    root: the directory as this route names it (a path for gcsfs).
    in_graph: TensorFlow reads `path(name)` itself (`tf.io.read_file`).
  """

  def __init__(self, *, url: str, root: str, fs=None):
    self.url = url
    self.root = root.rstrip("/")
    self.in_graph = fs is None
    self._fs = fs

  def path(self, name: str) -> str:
    """The full path of a file named relative to the root."""
    return posixpath.join(self.root, name)

  def list(self, beat: Beat = no_beat) -> list[str]:
    """Every file under the root, relative to it, sorted."""
    beat(f"listing {self.url}")
    if self._fs is not None:
      found = self._fs.find(self.root)
      return sorted(posixpath.relpath(path, self.root) for path in found)
    if "://" not in self.root:
      return _walk_once(self.root, beat)
    names = []
    for directory, _, files in tf.io.gfile.walk(self.root):
      relative = os.path.relpath(directory, self.root)
      names.extend(os.path.normpath(os.path.join(relative, f)) for f in files)
    return sorted(name.replace(os.sep, "/") for name in names)

  def read(self, name: str) -> bytes | None:
    """A whole file, or None when it does not exist."""
    path = self.path(name)
    if self._fs is not None:
      try:
        return self._fs.cat_file(path)
      except FileNotFoundError:
        return None
    if not tf.io.gfile.exists(path):
      return None
    with tf.io.gfile.GFile(path, "rb") as f:
      return f.read()

  def write(self, name: str, data: bytes) -> None:
    """Writes a whole file (one upload on Cloud Storage)."""
    if self._fs is not None:
      self._fs.pipe_file(self.path(name), data)
      return
    tf.io.gfile.makedirs(self.root)
    with tf.io.gfile.GFile(self.path(name), "wb") as f:
      f.write(data)

  def records(self, names: Sequence[str]) -> input_lib.IndexedRecords:
    """The files' bytes by index, for a route TensorFlow cannot read."""
    if self._fs is None:
      raise ValueError("TensorFlow reads these files itself; use path().")
    return input_lib.IndexedRecords.from_source(
      _BatchReader(self._fs, [self.path(name) for name in names])
    )


def _walk_once(root: str, beat: Beat) -> list[str]:
  """Every file under local directory `root`, relative to it, sorted.

  Symbolic links are followed, breadth first in name order. Every directory
  at the top is listed (in a files dataset each is a class); below the top
  each directory is listed once: a link that leads to a directory already
  listed (a loop, or a second way in) is named in a warning and not entered,
  so a loop cannot make the walk endless, and a link inside one top directory
  that leads to another never takes that one's place. A file reached by more
  than one name (a link to a file, or a top directory that leads to another)
  is listed under each name, said once in a warning.
  """
  names, listed, real = [], {}, {}
  pending = collections.deque([(root, 0)])
  while pending:
    directory, depth = pending.popleft()
    try:
      status = os.stat(directory)
    except FileNotFoundError:  # No such directory: no files, as tf.io.gfile.
      continue
    key = (status.st_dev, status.st_ino)
    if key in listed and depth != 1:
      logging.warning(
        "%s leads to %s, a directory already listed; not listed again.",
        directory,
        listed[key],
      )
      continue
    listed.setdefault(key, directory)
    beat(f"listing {directory}")
    real_directory = os.path.realpath(directory)
    with os.scandir(directory) as scan:
      entries = sorted(scan, key=lambda entry: entry.name)
    for entry in entries:
      if entry.is_dir():  # Follows a link to a directory.
        pending.append((entry.path, depth + 1))
        continue
      name = os.path.relpath(entry.path, root).replace(os.sep, "/")
      names.append(name)
      target = (
        os.path.realpath(entry.path)
        if entry.is_symlink()
        else os.path.join(real_directory, entry.name)
      )
      real.setdefault(target, []).append(name)
  _say_shared(root, real.values())
  return sorted(names)


def _say_shared(root: str, names_by_file) -> None:
  """One warning for the files under `root` listed by more than one name."""
  shared = sorted(sorted(names) for names in names_by_file if len(names) > 1)
  if not shared:
    return
  first = shared[0]
  logging.warning(
    "%d %s under %s %s reached by more than one name (first: %s is also "
    "%s); each name is listed.",
    len(shared),
    "file" if len(shared) == 1 else "files",
    root,
    "is" if len(shared) == 1 else "are",
    first[0],
    " and ".join(first[1:]),
  )


def open_files(
  url: str, *, storage: str = "auto", fuse_root: str = "/gcs"
) -> Files:
  """The files under `url` (local, FUSE_ROOT/BUCKET/PATH or gs://)."""
  root, fs = storage_lib.read_route(url, storage=storage, fuse_root=fuse_root)
  return Files(url=url, root=root, fs=fs)


def load_manifest(
  files: Files, *, manifest_dir: Files | None
) -> list[str] | None:
  """The file list saved for `files` in `manifest_dir`, or None.

  Raises:
    UserError: the manifest was made for another data directory.
  """
  saved = manifest_dir.read(MANIFEST) if manifest_dir else None
  if saved is None:
    return None
  content = json.loads(saved)
  if content["data_dir"] != files.url:
    raise UserError(
      f"{manifest_dir.path(MANIFEST)} lists the files of "
      f"{content['data_dir']}, not of --data_dir={files.url}; use a new "
      f"model directory, or remove the manifest to start over."
    )
  logging.info(
    "Training files: the %d listed in %s.",
    len(content["files"]),
    manifest_dir.path(MANIFEST),
  )
  return content["files"]


def save_manifest(
  files: Files, *, manifest_dir: Files, names: Sequence[str]
) -> None:
  """Saves the file list (names relative to `files.root`) for restarts."""
  manifest_dir.write(
    MANIFEST, json.dumps({"data_dir": files.url, "files": list(names)}).encode()
  )
  logging.info(
    "Training files: %d under %s, listed into %s.",
    len(names),
    files.url,
    manifest_dir.path(MANIFEST),
  )


class _BatchReader:
  """Reads a batch of objects concurrently with fsspec's `cat`."""

  def __init__(self, fs, paths: Sequence[str]):
    self._fs = fs
    self._paths = list(paths)

  def __len__(self) -> int:
    return len(self._paths)

  def __getitems__(self, keys: Sequence[int]) -> list[bytes]:
    paths = [self._paths[key] for key in keys]
    contents = self._fs.cat(paths, on_error="raise")
    return [contents[path] for path in paths]
