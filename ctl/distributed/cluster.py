"""Who am I in the cluster: TF_CONFIG (or CLUSTER_SPEC) as a value object.

Platforms describe a multi-worker job with a JSON environment variable in a few
dialects: the TensorFlow tutorial (`worker` jobs only, worker 0 is the chief),
Vertex AI (`chief` + `worker`, plus fields TensorFlow ignores), AI Platform
(`master` instead of `chief`) and Vertex AI's `CLUSTER_SPEC` (jobs named by
worker pool). `resolve` reads any of them into one `ClusterInfo`, failing fast
with a `UserError` on anything MultiWorkerMirroredStrategy cannot run, and
`install_tf_config` hands TensorFlow the plain dialect it understands.

A Kubernetes JobSet writes no such variable. Its pods learn who they are from
the labels JobSet puts on them, passed in by the downward API as the
`CTL_JOBSET_*` variables below (`ctl-k8s` writes them into the manifest), and
reach each other by the JobSet hostnames
`<jobset>-<replicatedjob>-<jobIndex>-<podIndex>.<subdomain>`; `resolve` builds
the same `ClusterInfo` from them when neither JSON variable is set.
"""

from collections.abc import Mapping, MutableMapping
import dataclasses
import json
import os
import re
import socket
from typing import Any

from ctl.errors import UserError

# Read in this order; the first one that is set and not blank wins.
ENV_VARS = ("TF_CONFIG", "CLUSTER_SPEC")

# Job names as written by the platforms -> the job they mean.
_JOB_ALIASES = {
  "chief": "chief",
  "master": "chief",  # AI Platform Training.
  "worker": "worker",
  "evaluator": "evaluator",
  "ps": "ps",
  # Vertex AI's CLUSTER_SPEC names jobs by worker pool.
  "workerpool0": "chief",
  "workerpool1": "worker",
  "workerpool2": "ps",
  "workerpool3": "evaluator",
}
_SUPPORTED_JOBS = sorted(k for k, v in _JOB_ALIASES.items() if v != "ps")

# The JobSet environment: each variable and where the manifest takes it from
# (a pod label by the downward API, or a value written by ctl-k8s).
JOBSET_NAME_ENV = "CTL_JOBSET_NAME"  # label jobset.sigs.k8s.io/jobset-name
# label jobset.sigs.k8s.io/replicatedjob-name: "chief" or "worker".
JOBSET_REPLICATED_JOB_ENV = "CTL_JOBSET_REPLICATED_JOB"
JOBSET_JOB_INDEX_ENV = (
  "CTL_JOBSET_JOB_INDEX"  # label jobset.sigs.k8s.io/job-index
)
# annotation batch.kubernetes.io/job-completion-index: the pod in its Job.
JOBSET_POD_INDEX_ENV = "CTL_JOBSET_POD_INDEX"
# label jobset.sigs.k8s.io/restart-attempt: how often JobSet restarted the
# job (the run ledger records it).
JOBSET_RESTART_ATTEMPT_ENV = "CTL_JOBSET_RESTART_ATTEMPT"
JOBSET_SUBDOMAIN_ENV = "CTL_JOBSET_SUBDOMAIN"  # value: network.subdomain
# value: the training replicated jobs in rank order, each as
# name=REPLICASxPODS (Jobs, and pods per Job), e.g. "chief=1x1,worker=1x3".
JOBSET_JOBS_ENV = "CTL_JOBSET_JOBS"
JOBSET_PORT_ENV = "CTL_JOBSET_PORT"  # value: the gRPC port of every task
JOBSET_ENV_VARS = (
  JOBSET_NAME_ENV,
  JOBSET_REPLICATED_JOB_ENV,
  JOBSET_JOB_INDEX_ENV,
  JOBSET_POD_INDEX_ENV,
  JOBSET_SUBDOMAIN_ENV,
  JOBSET_JOBS_ENV,
  JOBSET_PORT_ENV,
)
# The port ctl-k8s gives every task unless told otherwise.
JOBSET_DEFAULT_PORT = 2222
_SHAPE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)=([0-9]+)x([0-9]+)$")


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
  """The role of this process in a (possibly one-process) training cluster.

  Attributes:
    task_type: "chief", "worker" or "evaluator" (`master` is read as "chief").
    task_index: Index of this task within its job.
    chief: Address of the chief task, or empty if the cluster has none (the
      tutorial shape, where worker 0 is the chief).
    workers: Addresses of the `worker` tasks, in index order.
    trial: Hyperparameter-tuning trial id set by Vertex AI, or None.
    has_evaluator: Whether the cluster has a side-car evaluator task.
  """

  task_type: str = "chief"
  task_index: int = 0
  chief: tuple[str, ...] = ()
  workers: tuple[str, ...] = ()
  trial: str | None = None
  has_evaluator: bool = False

  @property
  def num_workers(self) -> int:
    """Training processes in the cluster (chief + workers; at least 1)."""
    return max(1, len(self.chief) + len(self.workers))

  @property
  def is_evaluator(self) -> bool:
    """True for a side-car evaluator: it trains nothing and writes nothing."""
    return self.task_type == "evaluator"

  @property
  def is_multi_worker(self) -> bool:
    """True if this process trains together with other processes."""
    return not self.is_evaluator and self.num_workers > 1

  @property
  def rank(self) -> int:
    """The worker number in logs, faults and heartbeats: the chief 0, then
    the workers."""
    if self.task_type == "worker" and self.chief:
      return self.task_index + 1
    return self.task_index

  @property
  def is_chief(self) -> bool:
    """True for the one training process that owns checkpoints and summaries."""
    if self.is_evaluator:
      return False
    if self.task_type == "chief":
      return True
    return not self.chief and self.task_index == 0


def resolve(*, environ: Mapping[str, str] = os.environ) -> ClusterInfo:
  """Reads the cluster description of this process from the environment.

  Args:
    environ: The environment to read `TF_CONFIG`, else `CLUSTER_SPEC`, from.

  Returns:
    The role of this process. Without either variable, the JobSet
    environment (`CTL_JOBSET_*`) if it is there; without any, or without a
    `cluster` in the JSON, this process is a lone chief.

  Raises:
    UserError: If the variable is not valid JSON, names an unknown job or task
      type, has an index out of range, lacks a `task` for a cluster of several
      tasks, or asks for parameter servers; or if the JobSet environment is
      incomplete or malformed.
  """
  for var in ENV_VARS:
    text = environ.get(var, "").strip()
    if text:
      return _parse(var, text)
  if any(environ.get(var) for var in JOBSET_ENV_VARS):
    return _from_jobset(environ)
  return ClusterInfo()


def jobset_hostname(
  *, jobset: str, replicated_job: str, job_index: int, pod_index: int
) -> str:
  """The hostname JobSet gives a pod (without the subdomain)."""
  return f"{jobset}-{replicated_job}-{job_index}-{pod_index}"


def _from_jobset(environ: Mapping[str, str]) -> ClusterInfo:
  """Builds the cluster from the `CTL_JOBSET_*` variables of a JobSet pod."""
  missing = [var for var in JOBSET_ENV_VARS if not environ.get(var, "").strip()]
  if missing:
    raise UserError(
      f"The JobSet environment lacks {', '.join(missing)}; give the pod the "
      "env that ctl-k8s writes into the manifest."
    )
  name, mine, subdomain = (
    environ[var].strip()
    for var in (
      JOBSET_NAME_ENV,
      JOBSET_REPLICATED_JOB_ENV,
      JOBSET_SUBDOMAIN_ENV,
    )
  )
  job_index, pod_index, port = (
    _jobset_int(environ, var)
    for var in (JOBSET_JOB_INDEX_ENV, JOBSET_POD_INDEX_ENV, JOBSET_PORT_ENV)
  )
  if not 0 < port < 65536:
    raise UserError(f"{JOBSET_PORT_ENV} must be a port, not {port}.")
  jobs = {}  # canonical job -> addresses, in rank order
  shapes = {}  # replicated job name -> (canonical job, replicas, pods)
  for part in environ[JOBSET_JOBS_ENV].split(","):
    match = _SHAPE.match(part.strip())
    if not match:
      raise UserError(
        f"{JOBSET_JOBS_ENV} entry {part.strip()!r} is not NAME=REPLICASxPODS "
        "(e.g. worker=1x3)."
      )
    rjob, replicas, pods = match.group(1), int(match[3]), int(match[4])
    job = _job_name(JOBSET_JOBS_ENV, rjob, what="replicated job")
    if job in jobs:
      raise UserError(f"{JOBSET_JOBS_ENV} lists the {job} job twice.")
    shapes[rjob] = (job, replicas, pods)
    jobs[job] = [
      jobset_hostname(
        jobset=name, replicated_job=rjob, job_index=j, pod_index=p
      )
      + f".{subdomain}:{port}"
      for j in range(replicas)
      for p in range(pods)
    ]
  if mine not in shapes:
    raise UserError(
      f"{JOBSET_REPLICATED_JOB_ENV} {mine!r} is not in {JOBSET_JOBS_ENV} "
      f"({environ[JOBSET_JOBS_ENV]})."
    )
  job, replicas, pods = shapes[mine]
  if not (job_index < replicas and pod_index < pods):
    raise UserError(
      f"Pod {job_index}-{pod_index} of replicated job {mine!r} is out of "
      f"range for its {replicas}x{pods} pods in {JOBSET_JOBS_ENV}."
    )
  config = {
    "cluster": jobs,
    "task": {"type": job, "index": job_index * pods + pod_index},
  }
  return _parse("The JobSet environment", json.dumps(config))


def _jobset_int(environ: Mapping[str, str], var: str) -> int:
  """Reads a non-negative integer JobSet variable."""
  text = environ[var].strip()
  if not text.isdigit():
    raise UserError(f"{var} must be a non-negative integer, not {text!r}.")
  return int(text)


def tf_config_json(info: ClusterInfo) -> str:
  """Returns the TF_CONFIG that TensorFlow should see for `info`.

  TensorFlow's `TFConfigClusterResolver` only knows `chief` and `worker` jobs
  for MultiWorkerMirroredStrategy, so `master` becomes `chief`, the evaluator
  and platform-specific fields are dropped, and a process that trains alone
  gets an empty cluster (TensorFlow then starts no gRPC server for it).

  Args:
    info: The role of this process, from `resolve`.

  Returns:
    A JSON string that `resolve` reads back into `info`, except that a process
    that trains with no other loses the addresses it never needs.
  """
  cluster = {}
  if info.is_multi_worker:
    if info.chief:
      cluster["chief"] = list(info.chief)
    if info.workers:
      cluster["worker"] = list(info.workers)
  task: dict[str, Any] = {"type": info.task_type, "index": info.task_index}
  if info.trial is not None:
    task["trial"] = info.trial
  return json.dumps({"cluster": cluster, "task": task})


def install_tf_config(
  info: ClusterInfo,
  *,
  environ: MutableMapping[str, str] = os.environ,
) -> None:
  """Sets `TF_CONFIG` to `tf_config_json(info)`, before a strategy is built.

  MultiWorkerMirroredStrategy reads the cluster from `TF_CONFIG` when it is
  built, and a platform's TF_CONFIG (or a CLUSTER_SPEC, which TensorFlow
  ignores) may be in a dialect it rejects or misreads. Setting the variable,
  rather than passing a `SimpleClusterResolver`, keeps TensorFlow's own
  `TFConfigClusterResolver`, the only resolver for which the strategy counts
  the local GPUs itself.

  Args:
    info: The role of this process, from `resolve`.
    environ: The environment to change.
  """
  environ["TF_CONFIG"] = tf_config_json(info)


def free_ports(count: int) -> list[int]:
  """Returns `count` distinct loopback ports that nothing listened on just now.

  All of them are held open while they are chosen, so they differ; another
  process may still take one before the caller binds it, so use them at once
  (a local cluster's workers, an emulator).
  """
  sockets = [socket.socket() for _ in range(count)]
  try:
    for s in sockets:
      s.bind(("localhost", 0))
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def _parse(var: str, text: str) -> ClusterInfo:
  """Parses the JSON text of environment variable `var`."""
  try:
    config = json.loads(text)
  except json.JSONDecodeError as e:
    raise UserError(f"{var} is not valid JSON ({e}).") from None
  if not isinstance(config, dict):
    raise UserError(f"{var} must be a JSON object, got {text!r}.")
  jobs = _parse_jobs(var, config.get("cluster") or {})
  task = config.get("task") or {}
  if not isinstance(task, dict):
    raise UserError(f"{var} 'task' must be a JSON object, got {task!r}.")

  if task:
    task_type = _job_name(var, task.get("type"), what="task type")
    task_index = task.get("index", 0)
  elif sum(len(addresses) for addresses in jobs.values()) > 1:
    raise UserError(
      f"{var} describes a cluster of several tasks but has no 'task' saying"
      " which one this process is."
    )
  else:  # A lone task, possibly with its address listed.
    task_type = next(iter(jobs), "chief")
    task_index = 0
  _check_task(var, jobs, task_type, task_index)
  trial = task.get("trial")
  return ClusterInfo(
    task_type=task_type,
    task_index=task_index,
    chief=jobs.get("chief", ()),
    workers=jobs.get("worker", ()),
    trial=None if trial is None else str(trial),
    has_evaluator="evaluator" in jobs or task_type == "evaluator",
  )


def _parse_jobs(var: str, cluster: Any) -> dict[str, tuple[str, ...]]:
  """Returns the non-empty jobs of a `cluster` object by canonical name."""
  if not isinstance(cluster, dict):
    raise UserError(f"{var} 'cluster' must be a JSON object, got {cluster!r}.")
  jobs = {}
  for name, addresses in cluster.items():
    job = _job_name(var, name, what="cluster job")
    if not isinstance(addresses, list) or not all(
      isinstance(a, str) and a for a in addresses
    ):
      raise UserError(
        f"{var} cluster job {name!r} must be a list of 'host:port' strings,"
        f" got {addresses!r}."
      )
    if not addresses:
      continue
    if job in jobs:
      raise UserError(
        f"{var} lists the {job} job twice (e.g. as both 'chief' and 'master')."
      )
    jobs[job] = tuple(addresses)
  if "chief" in jobs and len(jobs["chief"]) > 1:
    raise UserError(
      f"{var} lists {len(jobs['chief'])} chief tasks, but a"
      " cluster has at most one chief."
    )
  if "evaluator" in jobs and len(jobs["evaluator"]) > 1:
    raise UserError(
      f"{var} lists {len(jobs['evaluator'])} evaluator tasks, but"
      " TensorFlow supports at most one evaluator."
    )
  _check_distinct_addresses(var, jobs)
  return jobs


def _check_distinct_addresses(
  var: str, jobs: Mapping[str, tuple[str, ...]]
) -> None:
  """Refuses an address given to two tasks (this worker's twice, or a chief
  and a worker on one): each task serves on its own, so TensorFlow's
  start-up would wait for the task that can never come, until a stall
  limit killed it."""
  seen = {}
  for job, addresses in jobs.items():
    for index, address in enumerate(addresses):
      key = address.strip().lower()
      if key in seen:
        raise UserError(
          f"{var} gives the address {address} to both {seen[key]} and "
          f"{job} {index}; each task needs its own host:port."
        )
      seen[key] = f"{job} {index}"


def _job_name(var: str, name: Any, *, what: str) -> str:
  """Maps a platform's job name to its canonical name; rejects the rest."""
  job = _JOB_ALIASES.get(name) if isinstance(name, str) else None
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


def _check_task(
  var: str, jobs: Mapping[str, tuple[str, ...]], task_type: str, task_index: Any
) -> None:
  """Checks that the task exists in the cluster."""
  if isinstance(task_index, bool) or not isinstance(task_index, int):
    raise UserError(f"{var} task index must be an integer, got {task_index!r}.")
  trains_alone = not (jobs.keys() & {"chief", "worker"})
  if task_type in jobs:
    size = len(jobs[task_type])
  elif task_type == "evaluator" or trains_alone:
    size = 1  # TensorFlow allows both without their address in the cluster.
  else:
    raise UserError(f"{var} task type {task_type!r} has no job in its cluster.")
  if not 0 <= task_index < size:
    raise UserError(
      f"{var} task index {task_index} is out of range for the"
      f" {size} {task_type} task(s) in its cluster."
    )
