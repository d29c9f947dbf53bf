"""Who am I in the cluster: the platform's TF_CONFIG as a value object.

Platforms describe a multi-worker job in a dialect of TF_CONFIG (TF_CONFIG
itself, Vertex AI's CLUSTER_SPEC, a JobSet pod's variables); which one, and
its job names, is ctl.platform's to say. `resolve` parses the description
into one `ClusterInfo`, failing fast with a `UserError` on anything
MultiWorkerMirroredStrategy cannot run, and `install_tf_config` hands
TensorFlow the plain dialect it understands.
"""

from collections.abc import Mapping, MutableMapping
import dataclasses
import json
import os
from typing import Any

from ctl.errors import UserError
from ctl.platform import resolver
from ctl.platform import tf_config


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
    environ: The environment; ctl.platform.resolver says which of its
      variables describe the cluster.

  Returns:
    The role of this process. Without a description, or without a `cluster`
    in it, this process is a lone chief.

  Raises:
    UserError: If the description is not valid JSON, names an unknown job or
      task type, has an index out of range, lacks a `task` for a cluster of
      several tasks, or asks for parameter servers; or if the JobSet
      environment is incomplete or malformed.
  """
  described = resolver.cluster_description(environ)
  return _parse(*described) if described else ClusterInfo()


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
  environ[tf_config.VARIABLE] = tf_config_json(info)


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
    task_type = tf_config.job_name(var, task.get("type"), what="task type")
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
    job = tf_config.job_name(var, name, what="cluster job")
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
