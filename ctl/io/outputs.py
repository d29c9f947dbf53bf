"""Where a run writes checkpoints, TensorBoard logs and the SavedModel.

The same command line runs on a laptop, on AI Platform (which passes
`--job_dir`) and on Vertex AI (which sets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR
and AIP_TENSORBOARD_LOG_DIR when the job has a base output directory). For
each output the first of these that is set wins:

  1. its own flag (checkpoint_dir, tensorboard_dir, export_dir);
  2. a subdirectory of an explicit model_dir flag;
  3. its AIP_* variable;
  4. a subdirectory of job_dir, or of the parent of AIP_MODEL_DIR.

Hyperparameter tuning runs one trial per process with the same flags; when
CLOUD_ML_TRIAL_ID is set, directories that come from flags get a `trial_<id>`
subdirectory so trials do not overwrite each other. Vertex AI already gives
each trial its own AIP_* directories, so those are used as they are.
"""

from collections.abc import Mapping
import dataclasses
import os
import posixpath

from ctl.errors import UserError
from ctl.io import fencing
from ctl.io import storage
from ctl.platform import resolver

CHECKPOINTS_SUBDIR = "checkpoints"
TENSORBOARD_SUBDIR = "tensorboard"
EXPORT_SUBDIR = "saved_model"
# The run summary, in model_dir: the chief writes it once, at the run's end.
SUMMARY_FILE = "train_summary.json"
# The flags that name output directories: the keywords of resolve_output_dirs
# besides `environ`, so a caller with one attribute per flag passes them by name.
DIR_FLAGS = (
  "model_dir",
  "checkpoint_dir",
  "tensorboard_dir",
  "export_dir",
  "job_dir",
)


@dataclasses.dataclass(frozen=True)
class OutputDirs:
  """A run's output directories (local paths or gs:// urls, no trailing /).

  Attributes:
    model_dir: The run's root directory.
    checkpoint_dir: Where the chief's CheckpointManager writes.
    tensorboard_dir: Where the chief's summary writers write.
    export_dir: Where the final SavedModel goes.
  """

  model_dir: str
  checkpoint_dir: str
  tensorboard_dir: str
  export_dir: str


def resolve_output_dirs(
  *,
  model_dir: str | None,
  checkpoint_dir: str | None,
  tensorboard_dir: str | None,
  export_dir: str | None,
  job_dir: str | None,
  environ: Mapping[str, str],
) -> OutputDirs:
  """Resolves the output directories from flags and the environment.

  Args:
    model_dir: The model_dir flag, or None (or "") when not given.
    checkpoint_dir: The checkpoint_dir flag, or None.
    tensorboard_dir: The tensorboard_dir flag, or None.
    export_dir: The export_dir flag, or None.
    job_dir: AI Platform's job_dir flag, or None.
    environ: The environment, e.g. `os.environ`.

  Returns:
    The directories, by the precedence in the module docstring.

  Raises:
    UserError: If neither model_dir, job_dir nor AIP_MODEL_DIR is set, or a
      gs:// url names no bucket or an invalid one.
  """
  flags = (model_dir, checkpoint_dir, tensorboard_dir, export_dir, job_dir)
  platform_dirs = resolver.output_dirs(environ)
  for url in (*flags, *platform_dirs.values()):
    if url:
      storage.check_url(url)  # Before "gs://" loses its slashes below.
  trial_id = resolver.trial_id(environ)
  from_flag = lambda value: _in_trial(_normalize(value), trial_id)

  if model_dir:
    root, aip = from_flag(model_dir), {}
  else:
    aip = _platform_dirs(platform_dirs)
    root = from_flag(job_dir) or (
      aip[EXPORT_SUBDIR] and posixpath.dirname(aip[EXPORT_SUBDIR])
    )
  if not root:
    raise UserError(
      "No output directory is set: pass model_dir (or job_dir), "
      "or run where Vertex AI sets AIP_MODEL_DIR."
    )

  def resolve(flag: str | None, subdir: str) -> str:
    return from_flag(flag) or aip.get(subdir) or posixpath.join(root, subdir)

  return OutputDirs(
    model_dir=root,
    checkpoint_dir=resolve(checkpoint_dir, CHECKPOINTS_SUBDIR),
    tensorboard_dir=resolve(tensorboard_dir, TENSORBOARD_SUBDIR),
    export_dir=resolve(export_dir, EXPORT_SUBDIR),
  )


def _in_trial(path: str | None, trial_id: str | None) -> str | None:
  """`path`, below `trial_<id>` in a hyperparameter-tuning trial."""
  if path and trial_id:
    return posixpath.join(path, f"trial_{trial_id}")
  return path


def _platform_dirs(named: Mapping[str, str]) -> dict[str, str | None]:
  """The directories the platform names (Vertex AI's AIP_*), by the subdir
  each stands for."""
  return {
    CHECKPOINTS_SUBDIR: _normalize(named.get("checkpoint")),
    TENSORBOARD_SUBDIR: _normalize(named.get("tensorboard")),
    EXPORT_SUBDIR: _normalize(named.get("model")),
  }


def _normalize(path: str | None) -> str | None:
  """Drops the trailing slashes Vertex AI puts on its AIP_* directories."""
  return path.rstrip("/") if path else None


@dataclasses.dataclass(frozen=True)
class OpenedOutputs:
  """A run's output directories opened for TensorFlow (see ctl.io.storage).

  Attributes:
    model: where train_summary.json goes (chief only, else None).
    checkpoints: read by every worker; written by the chief.
    tensorboard: the chief's event files (else None).
    export: the chief's SavedModel (else None).
  """

  model: storage.Location | None
  checkpoints: storage.Location
  tensorboard: storage.Location | None
  export: storage.Location | None

  def close(self) -> None:
    """Publishes what is left and releases staging directories."""
    for location in (
      self.model,
      self.checkpoints,
      self.tensorboard,
      self.export,
    ):
      if location:
        location.close()


def check_reachable(
  dirs: OutputDirs,
  *,
  is_chief: bool,
  storage_route: str = "auto",
  fuse_root: str = "/gcs",
) -> None:
  """Fails at once, before any request, where Cloud Storage cannot be
  reached for the directories this worker uses (the chief all of them,
  another worker the checkpoints it reads): `storage.check_reachable`.
  Without it the first request (the lease's read) rides gcsfs's retries for
  most of a minute, then ends in a traceback.

  Raises:
    UserError: an invalid url, or a Cloud Storage host name that does not
      resolve.
  """
  for url in dataclasses.astuple(dirs) if is_chief else (dirs.checkpoint_dir,):
    storage.check_reachable(url, storage=storage_route, fuse_root=fuse_root)


def check_writable(dirs: OutputDirs, *, fuse_root: str = "/gcs") -> None:
  """Checks, before anything is written, that local outputs can be written:
  each directory, and the run summary, which a run writes only at its end,
  so that a summary it cannot write fails before the training, not after.

  Raises:
    UserError: a path that is a file or a directory this process may not
      write (see `storage.check_writable`), or a run summary that is a
      directory or a file this process may not write.
  """
  for url in dataclasses.astuple(dirs):
    storage.check_writable(url, fuse_root=fuse_root)
  _check_summary_writable(posixpath.join(dirs.model_dir, SUMMARY_FILE))


def _check_summary_writable(path: str) -> None:
  """Checks that the run summary at `path` can be written later (its
  directory is checked as an output directory); a gs:// url passes.

  Raises:
    UserError: `path` is a directory, or a file this process may not write.
  """
  if "://" in path:
    return
  if os.path.isdir(path):
    raise UserError(
      f"Cannot write the run summary {path}: it is a directory; remove it "
      "or choose another model_dir."
    )
  if os.path.exists(path) and not os.access(path, os.W_OK):
    raise UserError(
      f"Cannot write the run summary {path}: this process (user id "
      f"{os.geteuid()}) may not write it."
    )


def open_outputs(
  dirs: OutputDirs,
  *,
  is_chief: bool,
  storage_route: str = "auto",
  fuse_root: str = "/gcs",
  fence: fencing.Fence = fencing.OPEN,
) -> OpenedOutputs:
  """Opens the output directories this worker uses.

  Only the chief writes outputs; every other worker only reads checkpoints,
  read-only, through a private staging directory (several workers may share
  a machine), and opens nothing else, so it can never write into them.

  Args:
    dirs: the resolved directories.
    is_chief: whether this worker owns the outputs.
    storage_route: how gs:// urls are reached (ctl.io.storage.ROUTES).
    fuse_root: where Cloud Storage FUSE mounts buckets.
    fence: the chief's lease fence (ctl.io.fencing), checked before uploads.

  Returns:
    The opened locations.

  Raises:
    UserError: a directory that cannot be created or written, or a bucket that
      cannot be reached or written.
  """
  if is_chief:
    check_writable(dirs, fuse_root=fuse_root)

  def open_dir(url: str) -> storage.Location:
    return storage.open_location(
      url,
      storage=storage_route,
      fuse_root=fuse_root,
      read_only=not is_chief,
      fence=fence,
    )

  checkpoints = open_dir(dirs.checkpoint_dir)
  if not is_chief:
    return OpenedOutputs(
      model=None, checkpoints=checkpoints, tensorboard=None, export=None
    )
  return OpenedOutputs(
    model=open_dir(dirs.model_dir),
    checkpoints=checkpoints,
    tensorboard=open_dir(dirs.tensorboard_dir),
    export=open_dir(dirs.export_dir),
  )
