"""Vertex AI Reduction Server: the reducer pool of a custom job, and its terms.

Reduction Server replaces the ring all-reduce between machines by reducer
replicas (worker pool 2, CPU machines running Google's image) that sum the
gradients, which roughly halves the data each GPU worker sends. Vertex AI
documents when it works: the workers use GPUs and all-reduce with NCCL
(Google's NCCL transport plugin, present in the TensorFlow GPU images, does the
rest), so the trainer must run with `--collective=nccl` on every worker; on
CPU workers, or with TensorFlow's ring or gRPC collectives, the reducers cost
machines and change nothing. `ctl-vertex` builds the pool with `pool`, adds the
collective with `with_nccl`, and `check` refuses a spec that cannot pay.
"""

from collections.abc import Sequence
from typing import Any

from ctl import errors

IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
# The Vertex AI guide's machine for reducers: many vCPUs per GB, 32 Gbps.
DEFAULT_MACHINE_TYPE = "n1-highcpu-16"
POOL_INDEX = 2
_COLLECTIVE = "--collective="


def pool(*, count: int, machine_type: str) -> dict[str, Any]:
  """The camelCase reducer pool (`workerPoolSpecs[2]`) of `count` replicas."""
  if count < 1:
    raise errors.UserError(
      f"reduction_server_count must be at least 1, not {count}."
    )
  return {
    "replicaCount": count,
    "machineSpec": {"machineType": machine_type},
    "containerSpec": {"imageUri": IMAGE},
  }


def with_nccl(trainer_args: Sequence[str]) -> list[str]:
  """Returns the trainer command line with the NCCL collective it needs.

  Args:
    trainer_args: The trainer's command line (containerSpec.args).

  Returns:
    `trainer_args`, plus `--collective=nccl` unless it is already there
    (absl takes the last value, so it also beats one from a flagfile).

  Raises:
    errors.UserError: If the command line asks for another collective.
  """
  collective = _collective(trainer_args)
  if collective not in (None, "nccl"):
    raise errors.UserError(
      f"Reduction Server only speeds up NCCL all-reduce, but the trainer "
      f"runs with --collective={collective}; use --collective=nccl."
    )
  return list(trainer_args) + ([] if collective else [f"{_COLLECTIVE}nccl"])


def check(pools: Sequence[Any]) -> None:
  """Refuses a parsed spec whose reducer pool cannot pay.

  Args:
    pools: The parsed `worker_pool_specs` of a CustomJobSpec.

  Raises:
    errors.UserError: If pool 2 runs the Reduction Server image but there
      are no worker pool, CPU-only training machines, a trainer without
      `--collective=nccl`, or accelerators on the reducers.
  """
  if len(pools) <= POOL_INDEX or pools[POOL_INDEX].container_spec.image_uri != (
    IMAGE
  ):
    return
  where = f"workerPoolSpecs[{POOL_INDEX}]"
  if not pools[1].ByteSize():
    raise errors.UserError(
      f"{where} runs Reduction Server, which reduces between machines, but "
      "workerPoolSpecs[1] has no workers."
    )
  if pools[POOL_INDEX].machine_spec.accelerator_count:
    raise errors.UserError(
      f"{where} runs Reduction Server on CPUs; remove its accelerators."
    )
  for index in (0, 1):
    if not pools[index].machine_spec.accelerator_count:
      raise errors.UserError(
        f"{where} runs Reduction Server, which only speeds up GPU workers, "
        f"but workerPoolSpecs[{index}] has no accelerators."
      )
    if _collective(pools[index].container_spec.args) != "nccl":
      raise errors.UserError(
        f"{where} runs Reduction Server, which only speeds up NCCL "
        f"all-reduce; add --collective=nccl to workerPoolSpecs[{index}]"
        ".containerSpec.args."
      )


def _collective(trainer_args: Sequence[str]) -> str | None:
  """The last `--collective=` value on a trainer command line, or None."""
  values = [
    a[len(_COLLECTIVE) :] for a in trainer_args if a.startswith(_COLLECTIVE)
  ]
  return values[-1] if values else None
