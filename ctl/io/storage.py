"""Where a job's files live: a local directory, a FUSE mount, or gs://.

`open_location(url)` returns a `Location`: a directory TensorFlow reads and
writes (`local_path`) and, when the url is on Cloud Storage, `fetch()` and
`publish()` to copy files between that directory and the bucket.

Routes for gs://BUCKET/PATH, and for FUSE_ROOT/BUCKET/PATH (e.g. /gcs/B/P,
which is the same object path):

  fuse:  Vertex AI mounts buckets at /gcs/BUCKET with Cloud Storage FUSE. FUSE
         is not POSIX (no atomic rename; every write rewrites the object), so
         TensorFlow writes to a local staging directory and files are copied
         to the mount, the checkpoint state file last (see ctl.io.mirror).
  gcsfs: The same staging, uploaded with gcsfs over the JSON API. The project
         is CLOUD_ML_PROJECT_ID when set; STORAGE_EMULATOR_HOST points it at
         an emulator (anonymously).
  tf:    TensorFlow's own gs:// filesystem reads and writes the bucket
         directly; `fetch` and `publish` do nothing.
  auto:  fuse when FUSE_ROOT/BUCKET is a directory, else gcsfs.

Any other url (a local path, or a scheme TensorFlow knows) is used as is.

The fuse and gcsfs routes check that the bucket is writable before they
return, so a missing bucket or a missing permission stops the job before it
trains. Transient errors are retried under a `retry.RetryPolicy`.
"""

import errno
import hashlib
import ipaddress
import os
import posixpath
import re
import socket
import urllib.parse

from fsspec.implementations import local as fsspec_local

from ctl.errors import UserError
from ctl.io import fencing
from ctl.io import mirror as mirror_lib
from ctl.io import retry
from ctl.io import tempdirs
from ctl.platform import vertex_ai

ROUTES = ("auto", "fuse", "gcsfs", "tf")

# OSError numbers that a FUSE mount reports for a backend hiccup.
_TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.EAGAIN, errno.ETIMEDOUT})

_GCS_ENDPOINT = "https://storage.googleapis.com"

# Cloud Storage bucket names: lowercase letters, digits, "-", "_" and ".",
# starting and ending with a letter or digit; 3-63 characters, or up to 222
# with dots when each dot-separated part has at most 63.
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")


class Location:
  """A directory for TensorFlow, mirrored to Cloud Storage when it lives there.

  For local paths and the tf route TensorFlow writes `url` itself, and
  `fetch`, `publish` and `close` do nothing.

  Attributes:
    url: The location as the user gave it.
    local_path: The directory TensorFlow reads and writes: the url itself, or
      a local staging directory that `fetch` and `publish` keep in step with
      the bucket.
  """

  def __init__(
    self, *, url: str, local_path: str, mirror: mirror_lib.Mirror | None = None
  ):
    self.url = url
    self.local_path = local_path
    self._mirror = mirror

  @property
  def mirrored(self) -> bool:
    """Whether `publish` uploads (gcsfs, FUSE) rather than doing nothing."""
    return self._mirror is not None

  def fetch(self) -> None:
    """Copies the committed checkpoints from the bucket before a restore.

    Afterwards `tf.train.CheckpointManager(local_path)` sees the remote state
    file and the checkpoints it lists, and no stale local ones.
    """
    if self._mirror:
      self._mirror.fetch()

  def publish(
    self, *, commit_file: str | None = None, replaces: bool = False
  ) -> None:
    """Uploads new and changed files; blocks until they are in the bucket.

    Args:
      commit_file: A file (relative to `local_path`) uploaded after all others
        and before remote copies of locally deleted files are removed: pass
        "checkpoint", the CheckpointManager state file, so that the bucket
        never names a half-uploaded checkpoint as the latest.
      replaces: The files replace a whole (a SavedModel) rather than add to
        it: the remote commit file is removed before anything is uploaded,
        so no commit file ever stands beside a mix of old and new files.
    """
    if self._mirror:
      self._mirror.publish(commit_file=commit_file, replaces=replaces)

  def close(self) -> None:
    """Publishes a last time and releases the staging directory."""
    if self._mirror:
      self._mirror.close()


def _remote(url: str, bucket: str, path: str, storage: str, fuse_root: str):
  """(filesystem, remote directory, is_transient) of the fuse or gcsfs route.

  Raises:
    UserError: the fuse route's bucket is not mounted.
  """
  mount = os.path.join(fuse_root, bucket)
  if _route(storage, mount) == "fuse":
    if not os.path.isdir(mount):
      raise UserError(
        f"{url} is to be written through Cloud Storage FUSE, but "
        f"{mount} is not a directory; mount the bucket there or "
        f"use storage='gcsfs'."
      )
    return (
      fsspec_local.LocalFileSystem(auto_mkdir=True),
      posixpath.join(mount, path).rstrip("/"),
      _is_transient_fuse_error,
    )
  _check_resolvable(url)
  return (
    _gcs_filesystem(),
    posixpath.join(bucket, path).rstrip("/"),
    _is_transient_gcs_error,
  )


def _staging_dir(gs_url: str, *, read_only: bool) -> str:
  """A reader's fresh private directory; a writer's, found again on restart."""
  if read_only:
    return tempdirs.scratch_dir("ctl_staging_")
  return _default_staging_dir(gs_url)


def open_location(
  url: str,
  *,
  storage: str = "auto",
  fuse_root: str = vertex_ai.FUSE_ROOT,
  staging_dir: str | None = None,
  retry_policy: retry.RetryPolicy | None = None,
  read_only: bool = False,
  fence: fencing.Fence = fencing.OPEN,
) -> Location:
  """Opens a local or Cloud Storage directory for TensorFlow to use.

  Args:
    url: A local path, gs://BUCKET/PATH, or FUSE_ROOT/BUCKET/PATH.
    storage: The route for Cloud Storage urls, one of `ROUTES`.
    fuse_root: Where buckets are mounted with Cloud Storage FUSE.
    staging_dir: The local directory for the fuse and gcsfs routes. The default
      is private to the user (see ctl.io.tempdirs), depends only on the url, so
      a process restarted after a crash finds it again, and is removed on
      `close`; where another live process holds it, this one gets a fresh
      private directory instead. Processes on one machine that open the
      same url need distinct given ones.
    retry_policy: Retries of transient Cloud Storage errors (default 10 min).
    read_only: This process only reads (a non-chief worker's checkpoints, an
      evaluator): nothing is published, and the staging directory is a fresh
      private one by default.
    fence: checked before anything is uploaded (ctl.io.fencing).

  Returns:
    The opened location.

  Raises:
    UserError: If `storage` is unknown, the bucket is not mounted on the fuse
      route, the bucket cannot be written, or the given staging directory is
      in use.
  """
  _check_route(storage)
  parsed = _parse_cloud_url(url, fuse_root=fuse_root)
  if parsed is None:
    return Location(url=url, local_path=url)
  bucket, path = parsed
  gs_url = posixpath.join(f"gs://{bucket}", path).rstrip("/")
  if storage == "tf":
    _check_resolvable(url)  # TensorFlow's filesystem reaches the same host.
    return Location(url=url, local_path=gs_url)
  fs, remote_dir, is_transient = _remote(url, bucket, path, storage, fuse_root)
  local_dir, mirror = _staged(
    staging_dir or _staging_dir(gs_url, read_only=read_only),
    given=bool(staging_dir),
    fs=fs,
    remote_dir=remote_dir,
    url=url,
    retry_policy=retry_policy or retry.RetryPolicy(),
    is_transient=is_transient,
    read_only=read_only,
    remove_on_close=not staging_dir,
    fence=fence,
  )
  return Location(url=url, local_path=local_dir, mirror=mirror)


def _staged(
  local_dir: str, *, given: bool, **terms
) -> tuple[str, mirror_lib.Mirror]:
  """(the staging directory, its mirror) for `local_dir`.

  A default staging directory (not `given`) that another live process of
  this host holds (a live holder that `--take_over_lease` takes the run
  from) gives way to a fresh private one: the lease, not the staging
  directory, says who may write.
  """
  try:
    return local_dir, mirror_lib.Mirror(local_dir=local_dir, **terms)
  except mirror_lib.StagingInUse:
    if given:
      raise
  local_dir = tempdirs.scratch_dir("ctl_staging_")
  return local_dir, mirror_lib.Mirror(local_dir=local_dir, **terms)


def check_url(url: str, *, fuse_root: str = vertex_ai.FUSE_ROOT) -> None:
  """Checks that a Cloud Storage url names a valid bucket; local paths pass.

  Raises:
    UserError: gs:// (or FUSE_ROOT/) without a bucket, or with a bucket name
      that Cloud Storage does not allow.
  """
  _parse_cloud_url(url, fuse_root=fuse_root)


def check_reachable(
  url: str, *, storage: str = "auto", fuse_root: str = vertex_ai.FUSE_ROOT
) -> None:
  """Checks, in a moment, what `open_location` would otherwise find late.

  Raises:
    UserError: an invalid url, or (gcsfs and tf routes) a Cloud Storage
      host name that does not resolve.
  """
  parsed = _parse_cloud_url(url, fuse_root=fuse_root)
  if parsed and _route(storage, os.path.join(fuse_root, parsed[0])) != "fuse":
    _check_resolvable(url)


# How long one request to Cloud Storage may take, gcsfs's own retries
# included, where a command had rather say that the bucket does not answer
# than ride those retries for most of a minute (or, for a server that never
# replies, for ever): ctl-report, a node agent's persist of its step.
ANSWER_SECS = 10


def check_answers(
  url: str,
  *,
  storage: str = "auto",
  fuse_root: str = vertex_ai.FUSE_ROOT,
) -> None:
  """Asks Cloud Storage once about `url` (the gcsfs route); a directory
  (local, FUSE, TensorFlow's gs://) is not asked.

  Raises:
    OSError: (TimeoutError included) no answer within `ANSWER_SECS`: a
      refused or lost connection, a server that does not reply.
  """
  root, fs = read_route(url, storage=storage, fuse_root=fuse_root)
  if fs is not None:
    mirror_lib.object_generation(
      fs,
      posixpath.join(root, "ctl-answer-check"),  # Any name: 404 is an answer.
      timeout=ANSWER_SECS,
    )


def check_writable(url: str, *, fuse_root: str = vertex_ai.FUSE_ROOT) -> None:
  """Checks that this process can create or write a local directory `url`.

  Cloud Storage urls pass (their check writes a probe; see `Mirror`).

  Raises:
    UserError: a part of the path is a file, or the nearest existing
      directory is not writable by this process.
  """
  if _parse_cloud_url(url, fuse_root=fuse_root) is not None or "://" in url:
    return
  existing = os.path.abspath(url)
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  _check_path_limits(url, existing)
  if not os.path.isdir(existing):
    raise UserError(
      f"Cannot use {url} as a directory: {existing} is a file, not a directory."
    )
  if not os.access(existing, os.W_OK | os.X_OK):
    raise UserError(
      f"Cannot write to {url}: this process (user id "
      f"{os.geteuid()}) may not write in {existing}."
    )


# Kernel filesystems: a path there passes the access check (as root) and
# then fails on the first write with an OS error.
_VIRTUAL_FILESYSTEMS = ("/proc", "/sys")


def _check_path_limits(url: str, existing: str) -> None:
  """Refuses a local path the system cannot hold, before anything is written.

  Args:
    url: the directory as the user named it.
    existing: its nearest existing ancestor (or itself).

  Raises:
    UserError: a part of the path longer than the file system allows for one
      name, or a path in a kernel filesystem (/proc, /sys).
  """
  limit = (
    os.pathconf(existing, "PC_NAME_MAX") if os.path.isdir(existing) else 255
  )
  for part in os.path.abspath(url).split(os.sep):
    size = len(os.fsencode(part))
    if size > limit:
      raise UserError(
        f"Cannot use {url} as a directory: its part {part[:16]}... is {size} "
        f"bytes long, over the {limit}-byte limit of a file name here; "
        "choose a shorter name."
      )
  real = os.path.realpath(existing)
  for root in _VIRTUAL_FILESYSTEMS:
    if real == root or real.startswith(root + os.sep):
      raise UserError(
        f"Cannot use {url} as a directory: {root} is a kernel filesystem, "
        "not storage; choose a directory on a disk."
      )


def read_route(
  url: str, *, storage: str = "auto", fuse_root: str = vertex_ai.FUSE_ROOT
) -> tuple[str, object | None]:
  """How to read files under `url`: (root, None) or (root, gcsfs filesystem).

  With None, TensorFlow reads `root` itself: a local directory, the FUSE
  mount of the bucket, or gs:// through TensorFlow's own filesystem (tf
  route). With a filesystem, `root` is BUCKET/PATH on it (gcsfs route).

  Raises:
    UserError: If `storage` is unknown, or the fuse route is asked for and the
      bucket is not mounted.
  """
  _check_route(storage)
  parsed = _parse_cloud_url(url, fuse_root=fuse_root)
  if parsed is None:
    return url, None
  bucket, path = parsed
  mount = os.path.join(fuse_root, bucket)
  if storage == "tf":
    return posixpath.join(f"gs://{bucket}", path).rstrip("/"), None
  if storage == "fuse" or (storage == "auto" and os.path.isdir(mount)):
    if not os.path.isdir(mount):
      raise UserError(
        f"{url} is to be read through Cloud Storage FUSE, but "
        f"{mount} is not a directory; mount the bucket there or "
        f"use storage='gcsfs'."
      )
    return posixpath.join(mount, path).rstrip("/"), None
  return posixpath.join(bucket, path).rstrip("/"), _gcs_filesystem()


def _check_route(storage: str) -> None:
  if storage not in ROUTES:
    raise UserError(
      f"storage must be one of {', '.join(ROUTES)}, not {storage!r}."
    )


def _parse_cloud_url(url: str, *, fuse_root: str) -> tuple[str, str] | None:
  """Splits a Cloud Storage url into (bucket, path); None for other urls.

  Raises:
    UserError: the url names no bucket or an invalid bucket name.
  """
  fuse_prefix = fuse_root.rstrip("/") + "/"
  if url.startswith("gs://"):
    rest = url[len("gs://") :]
  elif url.startswith(fuse_prefix):
    rest = url[len(fuse_prefix) :]
  else:
    return None
  bucket, _, path = rest.partition("/")
  if not bucket:
    raise UserError(f"{url} names no bucket; write gs://BUCKET/PATH.")
  if not _valid_bucket_name(bucket):
    raise UserError(
      f"{bucket} is not a valid bucket name (in {url}): use 3-63 lowercase "
      "letters, digits, -, _ and ., starting and ending with a letter or "
      "digit."
    )
  return bucket, path.strip("/")


def _valid_bucket_name(name: str) -> bool:
  """Whether Cloud Storage allows `name` (its "Bucket names" rules)."""
  if (
    not _BUCKET_NAME.fullmatch(name)
    or name.startswith("goog")
    or ("google" in name)
  ):
    return False
  if any(len(part) > 63 or not part for part in name.split(".")):
    return False
  if "." not in name and len(name) > 63:
    return False
  try:
    ipaddress.ip_address(name)
  except ValueError:
    return True
  return False


def _default_staging_dir(gs_url: str) -> str:
  """`<tmp>/ctl-staging-<uid>/<hash of the url>`, in a private root."""
  digest = hashlib.sha256(gs_url.encode()).hexdigest()[:16]
  return os.path.join(tempdirs.private_root("ctl-staging"), digest)


def _route(storage: str, mount: str) -> str:
  if storage == "auto":
    return "fuse" if os.path.isdir(mount) else "gcsfs"
  return storage


def _check_resolvable(url: str) -> None:
  """Fails at once when gcsfs's Cloud Storage host name does not resolve.

  A name that does not resolve at start (no network, no DNS) is not a
  hiccup: without this check gcsfs and the retry policy would retry it for
  many minutes before the job says anything.

  Raises:
    UserError: the name does not resolve.
  """
  endpoint = os.environ.get("STORAGE_EMULATOR_HOST") or _GCS_ENDPOINT
  parsed = urllib.parse.urlsplit(
    endpoint if "://" in endpoint else f"http://{endpoint}"
  )
  try:
    socket.getaddrinfo(parsed.hostname, parsed.port or 443)
  except socket.gaierror as e:
    raise UserError(
      f"Cannot reach Cloud Storage for {url}: the host name "
      f"{parsed.hostname} does not resolve ({e.strerror}); check "
      "the network and DNS."
    ) from None


def _gcs_filesystem():
  """A gcsfs filesystem for the bucket, or for the emulator when one is set."""
  import gcsfs  # pylint: disable=g-import-not-at-top  (only gs:// needs it)

  emulator = os.environ.get("STORAGE_EMULATOR_HOST")
  # By default gcsfs.GCSFileSystem is an experimental subclass that asks each
  # bucket over gRPC whether it is zonal or hierarchical; an HTTP emulator
  # never answers and each call would wait about 60 s. The base class speaks
  # only the JSON API, as GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false would select
  # if it were set before gcsfs's first import.
  filesystem_class = (
    gcsfs.core.GCSFileSystem if emulator else gcsfs.GCSFileSystem
  )
  kwargs = {"token": "anon"} if emulator else {}
  if vertex_ai.project_id():
    kwargs["project"] = vertex_ai.project_id()
  return filesystem_class(use_listings_cache=False, **kwargs)


def _is_transient_gcs_error(error: Exception) -> bool:
  """429, 5xx, timeouts and dropped connections: as gcsfs itself retries."""
  from gcsfs import retry as gcsfs_retry  # pylint: disable=g-import-not-at-top

  return isinstance(error, TimeoutError) or gcsfs_retry.is_retriable(error)


def _is_transient_fuse_error(error: Exception) -> bool:
  return isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS
