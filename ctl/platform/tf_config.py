"""TF_CONFIG: the JSON cluster description every platform speaks in a dialect.

The TensorFlow tutorial writes `worker` jobs only (worker 0 is the chief),
Vertex AI `chief` + `worker` (plus fields TensorFlow ignores), AI Platform
`master` instead of `chief`, and Vertex AI's CLUSTER_SPEC names its jobs by
worker pool (ctl.platform.vertex_ai). `job_name` maps any of those names to the
job it means; ctl.distributed.cluster parses the description.
"""

from typing import Any

from ctl.errors import UserError
from ctl.platform import vertex_ai

VARIABLE = "TF_CONFIG"
# Job names as written by the platforms -> the job they mean.
JOB_ALIASES = {
  "chief": "chief",
  "master": "chief",  # AI Platform Training.
  "worker": "worker",
  "evaluator": "evaluator",
  "ps": "ps",
  **vertex_ai.POOL_JOBS,
}
_SUPPORTED_JOBS = sorted(k for k, v in JOB_ALIASES.items() if v != "ps")


def job_name(var: str, name: Any, *, what: str) -> str:
  """Maps a platform's job name to its canonical name; rejects the rest."""
  job = JOB_ALIASES.get(name) if isinstance(name, str) else None
  if job is None:
    raise UserError(
      f"{var} has unknown {what} {name!r}; expected one of"
      f" {', '.join(_SUPPORTED_JOBS)}."
    )
  if job == "ps":
    raise UserError(
      f"{var} has a parameter server ({name!r}), but ctl trains with"
      " MultiWorkerMirroredStrategy, which uses none: remove that worker"
      " pool."
    )
  return job
