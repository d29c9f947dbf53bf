"""ctl.cloud.vertex_check: the offline check of a CustomJobSpec, on specs as dicts.

tests/test_vertex.py checks it through job config files, field by field.
"""

import pytest

from ctl import errors
from ctl.cloud import vertex_check


def _pool(replicas):
  return {
    "replicaCount": replicas,
    "machineSpec": {"machineType": "n1-standard-4"},
    "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1"},
  }


@pytest.mark.parametrize(
  "machine_type,gpus",
  [
    ("a2-highgpu-2g", 2),
    ("a3-highgpu-8g", 8),
    ("g2-standard-48", 4),
    ("g2-standard-8", 1),
    ("n1-standard-8", None),
  ],
)
def test_gpus_come_with_accelerator_optimized_machine_types(machine_type, gpus):
  assert vertex_check.gpus_in_machine_type(machine_type) == gpus


def test_an_empty_pool_is_a_placeholder_between_the_chief_and_the_next():
  spec = {"workerPoolSpecs": [_pool(1), {}, _pool(1)]}
  pools = vertex_check.validate_job_spec(spec).worker_pool_specs
  assert [pool.replica_count for pool in pools] == [1, 0, 1]


def test_a_job_without_a_chief_is_one_sentence():
  # An empty first pool is no placeholder: every job has a chief.
  with pytest.raises(errors.UserError) as raised:
    vertex_check.validate_job_spec({"workerPoolSpecs": [{}, _pool(1)]})
  assert str(raised.value) == (
    "workerPoolSpecs[0] must describe the chief, the one machine every job has."
  )


@pytest.mark.parametrize(
  "machine_type, accelerator, count",
  [
    ("n1-standard-96", "NVIDIA_TESLA_V100", 8),
    ("n1-highmem-8", "NVIDIA_TESLA_V100", 2),
    ("n1-standard-4", "NVIDIA_TESLA_T4", 4),
    ("g2-standard-24", "NVIDIA_L4", 2),
    ("a2-ultragpu-8g", "NVIDIA_A100_80GB", 8),
    ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8),
    ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
    ("cloud-tpu", "TPU_V3", 8),
    ("e2-standard-8", None, None),
  ],
)
def test_machines_vertex_offers_pass(machine_type, accelerator, count):
  machine_spec = {"machineType": machine_type}
  if accelerator:
    machine_spec |= {"acceleratorType": accelerator, "acceleratorCount": count}
  spec = {"workerPoolSpecs": [{**_pool(1), "machineSpec": machine_spec}]}
  pool = vertex_check.validate_job_spec(spec).worker_pool_specs[0]
  assert pool.machine_spec.accelerator_count == (count or 0)
