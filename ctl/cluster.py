"""Who am I in the cluster: TF_CONFIG (or CLUSTER_SPEC) as a value object.

Platforms describe a multi-worker job with a JSON environment variable in a few
dialects: the TensorFlow tutorial (`worker` jobs only, worker 0 is the chief),
Vertex AI (`chief` + `worker`, plus fields TensorFlow ignores), AI Platform
(`master` instead of `chief`) and Vertex AI's `CLUSTER_SPEC` (jobs named by
worker pool). `resolve` reads any of them into one `ClusterInfo`, failing fast
with a `UserError` on anything MultiWorkerMirroredStrategy cannot run, and
`install_tf_config` hands TensorFlow the plain dialect it understands.
"""

from collections.abc import Mapping, MutableMapping
import dataclasses
import json
import os
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
    The role of this process. Without either variable, or without a `cluster`
    in it, this process is a lone chief.

  Raises:
    UserError: If the variable is not valid JSON, names an unknown job or task
      type, has an index out of range, lacks a `task` for a cluster of several
      tasks, or asks for parameter servers.
  """
  for var in ENV_VARS:
    text = environ.get(var, "").strip()
    if text:
      return _parse(var, text)
  return ClusterInfo()


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
  return jobs


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
