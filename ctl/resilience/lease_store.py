"""Where the run lease's record is kept and what it holds (ctl.resilience.lease).

The record (`Holder`, or `Damaged` for bytes that name no holder) is a small
JSON object; `encode` and `decode` turn it into the lease file's bytes and
back, refusing no input: what is not a holder's record is described. A store
keeps it at `<model_dir>/run.lease` and writes it only on a condition that
one writer of two wins: `FileStore` for local directories and the Cloud
Storage FUSE mount (O_EXCL, a rename aside, an flock around each
check-and-write), `GcsStore` for gs:// (the `ifGenerationMatch`
precondition). `open_store` picks one for a run directory. The rules of who
may take a lease are ctl.resilience.lease's.
"""

from collections.abc import Iterator
import contextlib
import dataclasses
import fcntl
import json
import math
import os
import reprlib
import time

from ctl import errors
from ctl.io import mirror
from ctl.io import storage

LEASE_FILE = "run.lease"

# How long a file lease's writer waits for another's check-and-write on the
# same directory (microseconds, unless that one is paused inside it).
_LOCK_WAIT_SECS = 5.0


@dataclasses.dataclass(frozen=True)
class Holder:
  """Who holds a lease (the record in the lease file).

  Attributes:
    host: the holder's host name.
    pid: its process id on that host.
    job: its job id ("" when it ran outside a supervisor).
    started: when it took the lease (seconds since the epoch).
    renewed: when it last renewed it (seconds since the epoch).
    generation: the fencing token: one more than the lease it replaced
      (1 for a new one), the same across renewals (0: a record written
      before generations existed).
    stale_secs: the holder's own staleness: its lease is stale once not
      renewed for that long (0: a record written before it was recorded;
      the taker's then applies).
    renew_secs: how often the holder renews it (0: a record written before
      it was recorded, whose holder renews every quarter of `stale_secs`).
    process: the holder's identity on its host (`ctl.processes.identity`:
      boot, pid and time namespaces, start time); "" where /proc could not
      say, or in a record written before it was recorded.
  """

  host: str
  pid: int
  job: str
  started: float
  renewed: float
  generation: int = 0
  stale_secs: float = 0.0
  renew_secs: float = 0.0
  process: str = ""

  def describe(self) -> str:
    job = f", job {self.job}" if self.job else ""
    return (
      f"pid {self.pid} on {self.host}{job} (lease generation "
      f"{self.generation}), since {when(self.started)}, "
      f"last renewed {when(self.renewed)}"
    )

  def renewal_period(self, stale_secs: float) -> float:
    """How often this holder renews its record (`stale_secs`: the reader's
    staleness, for a record that names none)."""
    if self.renew_secs > 0:
      return self.renew_secs
    return (self.stale_secs or stale_secs) / 4

  def same_holding(self, other: "Holder | Damaged") -> bool:
    """Whether `other` is this record, renewed or not (the same taking)."""
    return (
      isinstance(other, Holder)
      and dataclasses.replace(other, renewed=self.renewed) == self
    )


@dataclasses.dataclass(frozen=True)
class Damaged:
  """A lease file's record that is no `Holder`'s, and what is wrong with it.

  Read as a holder, it is no one's: no job (no job's fence passes on it)
  and generation 0 (its taker's is 1, as a first lease's).
  """

  what: str
  half_written: bool = False  # Empty or cut short: taken over as stale.
  job = ""
  generation = 0

  def describe(self) -> str:
    return f"a damaged lease record ({self.what})"


def when(seconds: float) -> str:
  return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def encode(holder: Holder) -> bytes:
  return json.dumps(dataclasses.asdict(holder)).encode()


def decode(data: bytes) -> Holder | Damaged:
  """The record `data` holds, or what makes it damaged.

  Fields a later version records are not this one's to judge; those an
  earlier one did not record take their defaults.
  """
  if not data.strip():
    return Damaged("it is empty", half_written=True)
  try:
    record = json.loads(data)
  except ValueError:  # Also bytes that are not UTF-8.
    return Damaged("it is not JSON", half_written=True)
  if not isinstance(record, dict):
    return Damaged("it is not a JSON object")
  fields = dataclasses.fields(Holder)
  for field in fields:
    if field.name not in record:
      if field.default is dataclasses.MISSING:
        return Damaged(f"it has no {field.name}")
    elif not _is_a(record[field.name], field.type):
      return Damaged(
        f"{field.name} is {reprlib.repr(record[field.name])}, not "
        f"{_KINDS[field.type]}"
      )
  return Holder(**{f.name: record[f.name] for f in fields if f.name in record})


# A record's field types, in words.
_KINDS = {str: "a string", int: "a whole number", float: "a number"}


def _is_a(value, kind: type) -> bool:
  """Whether JSON value `value` is a `kind`: a whole number is a number
  too, true and false are neither, and no number is infinite or NaN."""
  if isinstance(value, bool):
    return False
  if kind is str:
    return isinstance(value, str)
  numbers = (int, float) if kind is float else int
  return isinstance(value, numbers) and math.isfinite(value)


def open_store(model_dir: str, *, storage_route: str, fuse_root: str):
  root, fs = storage.read_route(
    model_dir,
    storage="gcsfs" if storage_route == "tf" else storage_route,
    fuse_root=fuse_root,
  )
  if fs is None:
    return FileStore(os.path.join(root, LEASE_FILE))
  return GcsStore(fs, f"{root}/{LEASE_FILE}", url=model_dir)


class FileStore:
  """The lease as a local (or FUSE) file; the token is the bytes written."""

  def __init__(self, path: str):
    self._path = path
    self._made_dir = None

  def read(
    self, *, timeout: float | None = None
  ) -> tuple[Holder, bytes] | None:
    """The record and its token, or None; `timeout` is for Cloud Storage."""
    del timeout  # A local or FUSE file answers or fails at once.
    try:
      with open(self._path, "rb") as f:
        data = f.read()
    except FileNotFoundError:
      return None
    return decode(data), data

  def create(self, data: bytes) -> bytes:
    directory = os.path.dirname(self._path)
    if not os.path.isdir(directory):
      os.makedirs(directory)
      self._made_dir = directory
    fd = os.open(self._path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    return data

  @contextlib.contextmanager
  def _locked(self) -> Iterator[None]:
    """One check-and-write at a time on this directory, for every process
    of this host (an flock on the directory, released when it is closed).

    Raises:
      FileExistsError: another process held it for `_LOCK_WAIT_SECS` (it is
        paused inside its own check-and-write): judge the lease again.
    """
    try:
      fd = os.open(os.path.dirname(self._path), os.O_RDONLY)
    except FileNotFoundError:  # No directory: no lease to check either.
      yield
      return
    try:
      deadline = time.monotonic() + _LOCK_WAIT_SECS
      while True:
        try:
          fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
          break
        except BlockingIOError:
          if time.monotonic() > deadline:
            raise FileExistsError(self._path) from None
          time.sleep(0.01)
        except OSError:  # A file system without flock: as before, unlocked.
          break
      yield
    finally:
      os.close(fd)

  def has_directory(self) -> bool:
    return os.path.isdir(os.path.dirname(self._path))

  def replace(self, data: bytes, token: bytes) -> bytes:
    with self._locked():
      found = self.read()
      if found is None or found[1] != token:
        raise FileExistsError(self._path)
      temporary = f"{self._path}.{os.getpid()}.tmp"
      with open(temporary, "wb") as f:
        f.write(data)
      os.replace(temporary, self._path)
    return data

  def take_over(self, data: bytes, token: bytes) -> bytes:
    with self._locked():
      aside = f"{self._path}.{os.getpid()}.old"
      try:
        os.rename(self._path, aside)
      except FileNotFoundError:
        raise FileExistsError(self._path) from None
      with open(aside, "rb") as f:
        moved = f.read()
      if moved != token:  # Renewed or replaced since it was judged.
        with contextlib.suppress(OSError):
          os.rename(aside, self._path)
        raise FileExistsError(self._path)
      os.remove(aside)
      return self.create(data)

  def delete(self, token: bytes) -> None:
    with self._locked():
      found = self.read()
      if found is not None and found[1] == token:
        os.remove(self._path)
    if self._made_dir:  # Leave no empty run directory the lease made.
      with contextlib.suppress(OSError):
        os.rmdir(self._made_dir)


class GcsStore:
  """The lease as a Cloud Storage object; the token is its generation."""

  def __init__(self, fs, path: str, *, url: str):
    self._fs = fs
    self._path = path
    self._bucket, _, self._key = path.partition("/")
    self._url = url  # The run directory as the user named it.

  def read(self, *, timeout: float | None = None) -> tuple[Holder, str] | None:
    """The record and its generation, or None; `timeout`: seconds before
    the generation's request is given up (None: gcsfs's own retries)."""
    # Generation first: content read after it is at least as new, and a
    # write conditioned on this generation fails if it changed.
    generation = mirror.object_generation(self._fs, self._path, timeout=timeout)
    try:
      data = None if generation == "0" else self._fs.cat_file(self._path)
    except FileNotFoundError:
      data = None  # Deleted in between.
    return None if data is None else (decode(data), generation)

  def has_directory(self) -> bool:
    """Whether any object is left under the run directory (its prefix)."""
    try:
      return bool(self._fs.ls(self._path.rpartition("/")[0], refresh=True))
    except FileNotFoundError:
      return False

  def create(self, data: bytes) -> str:
    return self._write(data, "0")

  def replace(self, data: bytes, token: str) -> str:
    return self._write(data, token)

  def take_over(self, data: bytes, token: str) -> str:
    return self._write(data, token)

  def delete(self, token: str) -> None:
    with contextlib.suppress(FileNotFoundError, FileExistsError):
      self._fs.call(
        "DELETE",
        "b/{}/o/{}",
        self._bucket,
        self._key,
        ifGenerationMatch=token,
      )

  def _write(self, data: bytes, generation: str) -> str:
    """Uploads `data` if the object's generation is `generation` (0: none).

    Raises:
      FileExistsError: the precondition failed (HTTP 412).
      UserError: the bucket does not exist or this job may not write it.
    """
    try:
      return mirror.put_if_generation(
        self._fs, self._path, data, generation=generation
      )
    except (FileNotFoundError, PermissionError) as error:
      raise errors.cannot_write(self._url, error) from error
