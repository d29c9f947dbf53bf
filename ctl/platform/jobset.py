"""A GKE JobSet pod's environment: the `CTL_JOBSET_*` variables as a TF_CONFIG.

A JobSet writes no TF_CONFIG. Its pods learn who they are from the labels
JobSet puts on them, passed in by the downward API as the variables below
(`ctl-k8s` writes them into the manifest, ctl.cloud.k8s), and reach each other
by the JobSet hostnames
`<jobset>-<replicatedjob>-<jobIndex>-<podIndex>.<subdomain>`.
"""

from collections.abc import Mapping
import os
import re

from ctl.errors import UserError
from ctl.platform import tf_config

# Each variable and where the manifest takes it from (a pod label by the
# downward API, or a value written by ctl-k8s).
NAME_ENV = "CTL_JOBSET_NAME"  # label jobset.sigs.k8s.io/jobset-name
# label jobset.sigs.k8s.io/replicatedjob-name: "chief" or "worker".
REPLICATED_JOB_ENV = "CTL_JOBSET_REPLICATED_JOB"
JOB_INDEX_ENV = "CTL_JOBSET_JOB_INDEX"  # label jobset.sigs.k8s.io/job-index
# annotation batch.kubernetes.io/job-completion-index: the pod in its Job.
POD_INDEX_ENV = "CTL_JOBSET_POD_INDEX"
# label jobset.sigs.k8s.io/restart-attempt: how often JobSet restarted the
# job (the run ledger records it).
RESTART_ATTEMPT_ENV = "CTL_JOBSET_RESTART_ATTEMPT"
SUBDOMAIN_ENV = "CTL_JOBSET_SUBDOMAIN"  # value: network.subdomain
# value: the training replicated jobs in rank order, each as
# name=REPLICASxPODS (Jobs, and pods per Job), e.g. "chief=1x1,worker=1x3".
JOBS_ENV = "CTL_JOBSET_JOBS"
PORT_ENV = "CTL_JOBSET_PORT"  # value: the gRPC port of every task
ENV_VARS = (
  NAME_ENV,
  REPLICATED_JOB_ENV,
  JOB_INDEX_ENV,
  POD_INDEX_ENV,
  SUBDOMAIN_ENV,
  JOBS_ENV,
  PORT_ENV,
)
# The port ctl-k8s gives every task unless told otherwise.
DEFAULT_PORT = 2222
DESCRIBED_BY = "The JobSet environment"  # What its errors name.
_SHAPE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)=([0-9]+)x([0-9]+)$")


def hostname(
  *, jobset: str, replicated_job: str, job_index: int, pod_index: int
) -> str:
  """The hostname JobSet gives a pod (without the subdomain)."""
  return f"{jobset}-{replicated_job}-{job_index}-{pod_index}"


def is_set(environ: Mapping[str, str] = os.environ) -> bool:
  """Whether any JobSet variable is set (this is a JobSet pod)."""
  return any(environ.get(var) for var in ENV_VARS)


def restart_attempt(environ: Mapping[str, str] = os.environ) -> int | None:
  """How often JobSet restarted the whole job, or None when not said."""
  text = environ.get(RESTART_ATTEMPT_ENV, "").strip()
  return int(text) if text.isdigit() else None


def tf_config_of(environ: Mapping[str, str]) -> dict:
  """The TF_CONFIG (`cluster` and `task`) of a JobSet pod, from its
  `CTL_JOBSET_*` variables."""
  missing = [var for var in ENV_VARS if not environ.get(var, "").strip()]
  if missing:
    raise UserError(
      f"{DESCRIBED_BY} lacks {', '.join(missing)}; give the pod the "
      "env that ctl-k8s writes into the manifest."
    )
  name, mine, subdomain = (
    environ[var].strip()
    for var in (NAME_ENV, REPLICATED_JOB_ENV, SUBDOMAIN_ENV)
  )
  job_index, pod_index, port = (
    _jobset_int(environ, var)
    for var in (JOB_INDEX_ENV, POD_INDEX_ENV, PORT_ENV)
  )
  if not 0 < port < 65536:
    raise UserError(f"{PORT_ENV} must be a port, not {port}.")
  jobs = {}  # canonical job -> addresses, in rank order
  shapes = {}  # replicated job name -> (canonical job, replicas, pods)
  for part in environ[JOBS_ENV].split(","):
    match = _SHAPE.match(part.strip())
    if not match:
      raise UserError(
        f"{JOBS_ENV} entry {part.strip()!r} is not NAME=REPLICASxPODS "
        "(e.g. worker=1x3)."
      )
    rjob, replicas, pods = match.group(1), int(match[3]), int(match[4])
    job = tf_config.job_name(JOBS_ENV, rjob, what="replicated job")
    if job in jobs:
      raise UserError(f"{JOBS_ENV} lists the {job} job twice.")
    shapes[rjob] = (job, replicas, pods)
    jobs[job] = [
      hostname(jobset=name, replicated_job=rjob, job_index=j, pod_index=p)
      + f".{subdomain}:{port}"
      for j in range(replicas)
      for p in range(pods)
    ]
  if mine not in shapes:
    raise UserError(
      f"{REPLICATED_JOB_ENV} {mine!r} is not in {JOBS_ENV} "
      f"({environ[JOBS_ENV]})."
    )
  job, replicas, pods = shapes[mine]
  if not (job_index < replicas and pod_index < pods):
    raise UserError(
      f"Pod {job_index}-{pod_index} of replicated job {mine!r} is out of "
      f"range for its {replicas}x{pods} pods in {JOBS_ENV}."
    )
  return {
    "cluster": jobs,
    "task": {"type": job, "index": job_index * pods + pod_index},
  }


def _jobset_int(environ: Mapping[str, str], var: str) -> int:
  """Reads a non-negative integer JobSet variable."""
  text = environ[var].strip()
  if not text.isdigit():
    raise UserError(f"{var} must be a non-negative integer, not {text!r}.")
  return int(text)
