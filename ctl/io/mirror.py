"""Keeps a local staging directory and a remote directory in step.

TensorFlow writes checkpoints and event files into a local directory; a
`Mirror` copies them to a directory on an fsspec filesystem (gcsfs for gs://,
the local filesystem for a Cloud Storage FUSE mount) and copies checkpoints
back before a restore.

Commit order: `tf.train.CheckpointManager` writes a checkpoint's data and index
files first and its state file ("checkpoint") last. `publish` keeps that order
remotely: new and changed files first, the state file after them, and only
then the deletion of the files the manager swept. Whenever a publish stops, the
remote state file names complete checkpoints only, and `fetch` copies exactly
those.

Fencing (ctl.io.fencing): a mirror uploads or deletes nothing unless its fence
passes (this process still holds the run directory's lease). On Cloud Storage
the state file is uploaded only if its object generation is still the one
this mirror last fetched or wrote (`put_if_generation`), so a writer taken
over between its fence check and its upload cannot overwrite the new
holder's state file.
"""

from collections.abc import Callable
import fcntl
import functools
import os
import posixpath
import re
import shutil
import uuid

import fsspec
from fsspec.implementations import local as local_fs

from ctl import errors
from ctl.errors import UserError
from ctl.io import checkpoint_state
from ctl.io import fencing
from ctl.io import retry

STATE_FILE = checkpoint_state.STATE_FILE

# A CheckpointManager checkpoint is PREFIX.index plus PREFIX.data-K-of-N.
_CHECKPOINT_FILE = re.compile(r"(?P<prefix>.+)\.(index|data-\d+-of-\d+)")

# What a file looked like when it was published: (size, mtime in ns).
_Stamp = tuple[int, int]


class StagingInUse(UserError):
  """Another process holds the staging directory a mirror was given."""


class Mirror:
  """Copies a local directory to a remote one and checkpoints back.

  A mirror owns its local directory: it holds an exclusive lock on it (a
  `.lock` file beside it) until `close()`, so two processes never fetch into
  or publish from the same staging directory.
  """

  def __init__(
    self,
    *,
    fs: fsspec.AbstractFileSystem,
    remote_dir: str,
    url: str,
    local_dir: str,
    retry_policy: retry.RetryPolicy,
    is_transient: Callable[[Exception], bool],
    read_only: bool = False,
    remove_on_close: bool = False,
    fence: fencing.Fence = fencing.OPEN,
  ):
    """Checks that the remote is writable, then creates and locks `local_dir`.

    The check writes and removes a probe object, so that a missing bucket or
    permission stops a job before it trains rather than at its first save.

    Args:
      fs: The remote filesystem.
      remote_dir: The remote directory, as a path of `fs`, without a trailing
        slash.
      url: The remote directory as the user named it, for error messages.
      local_dir: The local staging directory.
      retry_policy: How to retry each remote call.
      is_transient: Says which errors of `fs` are worth retrying.
      read_only: Only fetch (non-chief workers, evaluators): no write check,
        `publish` does nothing, and `close` deletes the local directory,
        which must then be private to this mirror.
      remove_on_close: `close` deletes the local directory (and its lock
        file) after the last publish, also when not read-only.
      fence: checked before anything is uploaded or deleted.

    Raises:
      UserError: If the remote directory cannot be written, or another mirror
        holds `local_dir`.
    """
    self._fs = fs
    self._remote_dir = remote_dir
    self._retry_policy = retry_policy
    self._is_transient = is_transient
    self._read_only = read_only
    self._remove_on_close = read_only or remove_on_close
    self._url = url
    self._fence = fence
    # The object generation of each file committed conditionally (the state
    # file on Cloud Storage): what this mirror last fetched or wrote.
    self._generations: dict[str, str] = {}
    if not read_only:
      self._check_writable(url)
    self._local_dir = local_dir
    self._published: dict[str, _Stamp] = {}
    self._commit_file = None
    os.makedirs(local_dir, mode=0o700, exist_ok=True)
    self._lock = _lock(local_dir)

  def fetch(self) -> None:
    """Makes the local directory hold the remote's committed checkpoints.

    Copies the remote state file and every file of the checkpoints it lists,
    and removes local checkpoint files (and a local state file) the remote
    does not list, e.g. ones saved by a process that died before publishing
    them. The state file is written last, so an interrupted fetch leaves no
    local state file and the next fetch starts over.

    Raises:
      UserError: If the remote state file cannot be parsed.
    """
    state = self._remote_state()
    local_state = os.path.join(self._local_dir, STATE_FILE)
    if os.path.exists(local_state):
      os.remove(local_state)
    wanted = set()
    if state is not None:
      listed = _listed_checkpoints(state, where=self._remote(STATE_FILE))
      remote_names = (
        posixpath.basename(path)
        for path in self._call(
          "list " + self._remote_dir,
          self._fs.ls,
          self._remote_dir,
          detail=False,
        )
      )
      wanted = {
        name for name in remote_names if _checkpoint_prefix(name) in listed
      }
    for name in os.listdir(self._local_dir):
      if _checkpoint_prefix(name) and name not in wanted:
        os.remove(os.path.join(self._local_dir, name))
    self._published = {}
    for name in sorted(wanted):
      self._call(
        "download " + name,
        self._fs.get_file,
        self._remote(name),
        os.path.join(self._local_dir, name),
      )
      self._published[name] = _stamp(os.path.join(self._local_dir, name))
    if state is not None:
      with open(local_state, "wb") as f:
        f.write(state)
      self._published[STATE_FILE] = _stamp(local_state)

  def publish(
    self, *, commit_file: str | None = None, replaces: bool = False
  ) -> None:
    """Uploads new and changed files, then deletes the locally deleted ones.

    Args:
      commit_file: A file (relative to the local directory) uploaded after
        every other file and before any deletion, such as the checkpoint state
        file. Once given, it stays the commit file for later calls.
      replaces: When anything changed, remove the remote commit file first:
        until the new one is uploaded the remote holds no commit (a SavedModel
        replaced in place, where a stale commit would vouch for a mix).
    """
    if self._read_only:
      return
    if commit_file is not None:
      self._commit_file = commit_file
    local = self._local_stamps()
    changed = sorted(
      name
      for name, stamp in local.items()
      if self._published.get(name) != stamp
    )
    removed = sorted(self._published.keys() - local.keys())
    if changed or removed:
      self._fence.check(f"files in {self._url}")
    if self._commit_file in changed:
      changed.remove(self._commit_file)
      changed.append(self._commit_file)
      if replaces:
        self._remove_remote(self._commit_file)
    for name in changed:
      self._upload(name, replacing=name in self._published)
      self._published[name] = local[name]
    for name in removed:
      self._remove_remote(name)

  def _upload(self, name: str, *, replacing: bool) -> None:
    """Uploads one file; a replaced one is never seen cut short.

    An object store shows an object only once its upload is complete. A
    local or FUSE-mounted directory shows a file while it is written, so
    there a file published before (a TensorBoard events file that grew, the
    state file) goes to a temporary name first and is renamed over the old
    one: a process killed mid-copy leaves the old whole, not a file cut
    short (the steps it held lost). A temporary left by such a kill has a
    name no reader looks for.
    """
    source = os.path.join(self._local_dir, name)
    if name in self._generations:
      self._put_if_unchanged(name, source)
      return
    if not (replacing and isinstance(self._fs, local_fs.LocalFileSystem)):
      self._call(
        "upload " + name, self._fs.put_file, source, self._remote(name)
      )
      return
    temporary = self._remote(f".ctl-upload-{uuid.uuid4().hex}")
    self._call("upload " + name, self._fs.put_file, source, temporary)
    self._call("replace " + name, self._fs.mv, temporary, self._remote(name))

  def _put_if_unchanged(self, name: str, source: str) -> None:
    """Uploads `name` if the remote one is the one this mirror last saw.

    When it is not and this process's fence still passes (it still holds
    the run directory), the other writer was one of its own job's: a node
    agent that persisted its dead worker's step into the state file
    (ctl.checkpoint.tiers.bucket_tier). This process's state then replaces
    it (its CheckpointManager owns the listing, and resumed at that step or
    later), and the files of what only the replaced state listed are
    removed, as the manager removes what it drops.

    Raises:
      LeaseLost: another job's writer replaced it (the one that took the
        lease, named when the fence says so), or the file kept changing.
    """
    with open(source, "rb") as f:
      data = f.read()
    replaced = None
    for _ in range(2):
      try:
        self._generations[name] = self._call(
          "upload " + name,
          put_if_generation,
          self._fs,
          self._remote(name),
          data,
          generation=self._generations[name],
        )
      except FileExistsError:
        self._fence.check(f"{name} in {self._url}")
        if name != STATE_FILE:
          break
        replaced = self._remote_state()  # Its generation, then its text.
        continue
      if replaced is not None:  # Removed once nothing lists them.
        self._remove_only_listed_by(replaced, data)
      return
    raise errors.LeaseLost(
      f"Another writer replaced {name} in {self._url} since this process "
      "last wrote it; it stopped without overwriting it."
    )

  def _remove_only_listed_by(self, replaced: bytes, state: bytes) -> None:
    """Removes the remote files of the checkpoints state file `replaced`
    lists and `state` does not (nor the local directory holds)."""
    where = self._remote(STATE_FILE)
    try:
      dropped = _listed_checkpoints(
        replaced, where=where
      ) - _listed_checkpoints(state, where=where)
    except UserError:  # Not a state file: nothing known to remove.
      return
    local = {_checkpoint_prefix(n) for n in os.listdir(self._local_dir)}
    for name in self._call("list", self._fs.ls, self._remote_dir, detail=False):
      prefix = _checkpoint_prefix(posixpath.basename(name))
      if prefix in dropped and prefix not in local:
        self._remove_remote(posixpath.basename(name))

  def _remove_remote(self, name: str) -> None:
    try:
      self._call("delete " + name, self._fs.rm_file, self._remote(name))
    except FileNotFoundError:
      pass  # Someone else removed it already (or it never was there).
    self._published.pop(name, None)
    self._generations.pop(name, None)

  def close(self) -> None:
    """Publishes a last time and releases (or deletes) the directory."""
    try:
      self.publish()
    finally:
      self._lock.close()
      if self._remove_on_close:
        shutil.rmtree(self._local_dir, ignore_errors=True)
        os.remove(self._local_dir.rstrip("/") + ".lock")

  def _check_writable(self, url: str) -> None:
    probe = self._remote(f".ctl-write-check-{uuid.uuid4().hex}")
    try:
      self._call("write " + probe, self._fs.pipe_file, probe, b"")
      self._call("remove " + probe, self._fs.rm_file, probe)
    except Exception as error:  # pylint: disable=broad-except
      raise errors.cannot_write(url, error) from error

  def _remote(self, name: str) -> str:
    return posixpath.join(self._remote_dir, name)

  def _remote_state(self) -> bytes | None:
    if not isinstance(self._fs, local_fs.LocalFileSystem):
      # Generation first: the content read after it is at least as new, and
      # an upload conditioned on it fails if it changed.
      self._generations[STATE_FILE] = self._call(
        "read " + STATE_FILE,
        object_generation,
        self._fs,
        self._remote(STATE_FILE),
      )
    try:
      return self._call(
        "read " + STATE_FILE, self._fs.cat_file, self._remote(STATE_FILE)
      )
    except FileNotFoundError:
      return None

  def _local_stamps(self) -> dict[str, _Stamp]:
    stamps = {}
    for root, _, files in os.walk(self._local_dir):
      for file in files:
        path = os.path.join(root, file)
        stamps[os.path.relpath(path, self._local_dir).replace(os.sep, "/")] = (
          _stamp(path)
        )
    return stamps

  def _call(self, what, method, *args, **kwargs):
    """Calls `method` of the remote filesystem under the retry policy."""
    timeout = self._retry_policy.attempt_timeout_s
    if timeout and self._fs.async_impl:
      # fsspec's blocking wrapper of an async filesystem cancels the whole
      # call, gcsfs's own retries included, after `timeout` seconds.
      kwargs["timeout"] = timeout
    return retry.call(
      functools.partial(method, *args, **kwargs),
      policy=self._retry_policy,
      is_transient=self._is_transient,
      what=what,
    )


def object_generation(fs, path: str, *, timeout: float | None = None) -> str:
  """The generation of Cloud Storage object `path` ("0" when there is none).

  Args:
    fs: a gcsfs filesystem.
    path: BUCKET/KEY.
    timeout: seconds before the call is given up (None: gcsfs's own).
  """
  bucket, _, key = path.partition("/")
  try:
    info = fs.call(
      "GET", "b/{}/o/{}", bucket, key, json_out=True, timeout=timeout
    )
  except FileNotFoundError:
    return "0"
  return str(info["generation"])


def put_if_generation(
  fs, path: str, data: bytes, *, generation: str, timeout: float | None = None
) -> str:
  """Uploads `data` to object `path` if its generation is `generation`.

  Cloud Storage checks the precondition (`ifGenerationMatch`) and writes in
  one step, so of two writers conditioned on one generation exactly one
  succeeds.

  Args:
    fs: a gcsfs filesystem.
    path: BUCKET/KEY.
    data: the object's new content.
    generation: the generation it must have now ("0": it must not exist).
    timeout: seconds before the call is given up (None: gcsfs's own).

  Returns:
    The generation written.

  Raises:
    FileExistsError: the precondition failed (HTTP 412).
  """
  bucket, _, key = path.partition("/")
  result = fs.call(
    "POST",
    f"{fs._location}/upload/storage/v1/b/{bucket}/o",  # pylint: disable=protected-access
    uploadType="media",
    name=key,
    ifGenerationMatch=generation,
    data=data,
    json_out=True,
    timeout=timeout,
  )
  return str(result["generation"])


def _lock(directory: str):
  """Holds an exclusive lock on `directory` until the returned file closes.

  The lock file is private (0600) and never reached through a link.
  """
  path = directory.rstrip("/") + ".lock"
  try:
    handle = os.fdopen(
      os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
      ),
      "w",
    )
  except OSError as e:
    raise UserError(
      f"Cannot lock the staging directory {directory}: {path} "
      f"cannot be opened ({e.strerror})."
    ) from None
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    handle.close()
    raise StagingInUse(
      f"The staging directory {directory} is in use by another process; "
      f"give each process its own staging_dir."
    ) from None
  return handle


def _stamp(path: str) -> _Stamp:
  stat = os.stat(path)
  return stat.st_size, stat.st_mtime_ns


def _checkpoint_prefix(name: str) -> str | None:
  match = _CHECKPOINT_FILE.fullmatch(name)
  return match and match.group("prefix")


def _listed_checkpoints(state: bytes, *, where: str) -> set[str]:
  """The checkpoint prefixes a CheckpointManager state file lists."""
  try:
    listed = checkpoint_state.parse(state)
  except checkpoint_state.Damaged:
    raise UserError(
      f"The checkpoint state file {where} cannot be parsed; "
      f"restore it from a backup or remove it to start over."
    ) from None
  return {posixpath.basename(name) for name in listed.names}
