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

import dataclasses
import posixpath
from typing import Mapping

from ctl.errors import UserError

CHECKPOINTS_SUBDIR = "checkpoints"
TENSORBOARD_SUBDIR = "tensorboard"
EXPORT_SUBDIR = "saved_model"


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


def resolve_output_dirs(*, model_dir: str | None, checkpoint_dir: str | None,
                        tensorboard_dir: str | None, export_dir: str | None,
                        job_dir: str | None,
                        environ: Mapping[str, str]) -> OutputDirs:
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
    UserError: If neither model_dir, job_dir nor AIP_MODEL_DIR is set.
  """
  trial_id = environ.get("CLOUD_ML_TRIAL_ID")

  def from_flag(value: str | None) -> str | None:
    value = _normalize(value)
    return posixpath.join(value, f"trial_{trial_id}") if (
        value and trial_id) else value

  aip_model_dir = _normalize(environ.get("AIP_MODEL_DIR"))
  if model_dir:
    root = from_flag(model_dir)
    aip = {}
  else:
    root = from_flag(job_dir) or (aip_model_dir and
                                  posixpath.dirname(aip_model_dir))
    aip = {
        CHECKPOINTS_SUBDIR: _normalize(environ.get("AIP_CHECKPOINT_DIR")),
        TENSORBOARD_SUBDIR: _normalize(environ.get("AIP_TENSORBOARD_LOG_DIR")),
        EXPORT_SUBDIR: aip_model_dir,
    }
  if not root:
    raise UserError("No output directory is set: pass model_dir (or job_dir), "
                    "or run where Vertex AI sets AIP_MODEL_DIR.")

  def resolve(flag: str | None, subdir: str) -> str:
    return (from_flag(flag) or aip.get(subdir) or
            posixpath.join(root, subdir))

  return OutputDirs(
      model_dir=root,
      checkpoint_dir=resolve(checkpoint_dir, CHECKPOINTS_SUBDIR),
      tensorboard_dir=resolve(tensorboard_dir, TENSORBOARD_SUBDIR),
      export_dir=resolve(export_dir, EXPORT_SUBDIR))


def _normalize(path: str | None) -> str | None:
  """Drops the trailing slashes Vertex AI puts on its AIP_* directories."""
  return path.rstrip("/") if path else None
