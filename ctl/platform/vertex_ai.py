"""Vertex AI's variables: what a custom job's worker reads from its environment.

Vertex AI describes the cluster in `CLUSTER_SPEC` (TF_CONFIG's dialect with
jobs named by worker pool) besides TF_CONFIG, sets `AIP_MODEL_DIR`,
`AIP_CHECKPOINT_DIR` and `AIP_TENSORBOARD_LOG_DIR` when the job has a base
output directory (with a trailing slash), names the job (`CLOUD_ML_JOB_ID`),
a tuning trial (`CLOUD_ML_TRIAL_ID`) and the project (`CLOUD_ML_PROJECT_ID`),
and mounts buckets at /gcs/BUCKET with Cloud Storage FUSE. The tuning metric
file (`CLOUD_ML_HP_METRIC_FILE`) is read by `cloudml-hypertune` itself
(ctl.telemetry.hypertune).
"""

from collections.abc import Mapping
import os

CLUSTER_SPEC = "CLUSTER_SPEC"
JOB_ID = "CLOUD_ML_JOB_ID"
TRIAL_ID = "CLOUD_ML_TRIAL_ID"
PROJECT_ID = "CLOUD_ML_PROJECT_ID"
FUSE_ROOT = "/gcs"  # Where Cloud Storage FUSE mounts the buckets.
# The output directory variables, by what each directory holds.
OUTPUT_DIRS = {
  "model": "AIP_MODEL_DIR",
  "checkpoint": "AIP_CHECKPOINT_DIR",
  "tensorboard": "AIP_TENSORBOARD_LOG_DIR",
}
# CLUSTER_SPEC's worker pools -> the TF_CONFIG job each one is.
POOL_JOBS = {
  "workerpool0": "chief",
  "workerpool1": "worker",
  "workerpool2": "ps",
  "workerpool3": "evaluator",
}


def output_dirs(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
  """The AIP_* directories that are set, by what each holds (`OUTPUT_DIRS`),
  as Vertex AI writes them (with a trailing slash)."""
  return {
    role: environ[name]
    for role, name in OUTPUT_DIRS.items()
    if environ.get(name)
  }


def job_id(environ: Mapping[str, str] = os.environ) -> str:
  """The Vertex AI job id, or ""."""
  return environ.get(JOB_ID) or ""


def trial_id(environ: Mapping[str, str] = os.environ) -> str | None:
  """The hyperparameter-tuning trial id, or None outside a tuning job."""
  return environ.get(TRIAL_ID) or None


def project_id(environ: Mapping[str, str] = os.environ) -> str | None:
  """The project the job runs in, or None."""
  return environ.get(PROJECT_ID) or None
