"""Which platform describes this process, and what it says: the one place the
rest of ctl asks for a platform's cluster, job id, tuning trial and output
directories (each platform's own variables are in its module).

The cluster description is the first one set of: TF_CONFIG (ctl-launch, the
TensorFlow tutorial, Vertex AI, AI Platform), Vertex AI's CLUSTER_SPEC, a GKE
JobSet pod's CTL_JOBSET_* variables; none: a lone process.
"""

from collections.abc import Mapping
import json
import os

from ctl import env
from ctl.platform import jobset
from ctl.platform import tf_config
from ctl.platform import vertex_ai

# The JSON variables, read in this order; the first set and not blank wins.
CLUSTER_VARIABLES = (tf_config.VARIABLE, vertex_ai.CLUSTER_SPEC)


def cluster_description(
  environ: Mapping[str, str] = os.environ,
) -> tuple[str, str] | None:
  """(what the description's errors name, its TF_CONFIG JSON text), or None
  when no platform describes a cluster.

  Raises:
    UserError: the JobSet environment is incomplete or malformed.
  """
  for var in CLUSTER_VARIABLES:
    text = environ.get(var, "").strip()
    if text:
      return var, text
  if jobset.is_set(environ):
    return jobset.DESCRIBED_BY, json.dumps(jobset.tf_config_of(environ))
  return None


def job_id(environ: Mapping[str, str] = os.environ) -> str:
  """The supervisor's job id (CTL_JOB_ID, ctl.launch's), else Vertex AI's,
  or "": a blank one is none (a restart of the same job takes its lease)."""
  return env.job_id(environ) or vertex_ai.job_id(environ).strip()


def trial_id(environ: Mapping[str, str] = os.environ) -> str | None:
  """The hyperparameter-tuning trial this process is, or None."""
  return vertex_ai.trial_id(environ)


def output_dirs(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
  """The output directories the platform names, by what each holds
  ("model", "checkpoint", "tensorboard"); only Vertex AI names any."""
  return vertex_ai.output_dirs(environ)
