"""ctl.vertex_check: the offline check of a CustomJobSpec, on specs as dicts.

tests/test_vertex.py checks it through job config files, field by field.
"""

import pytest

from ctl import errors
from ctl import vertex_check


def _pool(replicas):
  return {
    "replicaCount": replicas,
    "machineSpec": {"machineType": "n1-standard-4"},
    "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1"},
  }


@pytest.mark.parametrize(
  "machine_type,gpus",
  [("a2-highgpu-2g", 2), ("a3-highgpu-8g", 8), ("n1-standard-8", None)],
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
