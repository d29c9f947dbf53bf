"""ctl.cloud.reduction_server: the reducer pool ctl-vertex adds, and when it refuses.

Every spec here goes through `vertex_check.validate_job_spec`, the offline check of
the Vertex AI client library's own CustomJobSpec types.
"""

import copy

import pytest
import yaml

from ctl import errors
from ctl.cloud import reduction_server
from ctl.cloud import vertex
from ctl.cloud import vertex_check
from tests.conftest import run_trainer
from tests.conftest import trainer_env
from trainer.testing import vertex_output_env

_IMAGE = "us-docker.pkg.dev/project/ctl/trainer:latest"


def _spec(**overrides):
  kwargs = dict(
    image=_IMAGE,
    num_workers=4,
    machine_type="a2-highgpu-1g",
    accelerator_type="NVIDIA_TESLA_A100",
    reduction_server_count=4,
    trainer_args=["--flagfile=configs/cassava_resnet50.cfg"],
  )
  kwargs.update(overrides)
  return vertex.build_job_spec(**kwargs)


def test_reducers_are_pool_2_and_the_workers_all_reduce_with_nccl():
  job_spec = vertex_check.validate_job_spec(_spec())

  chief, workers, reducers = job_spec.worker_pool_specs
  assert (reducers.replica_count, reducers.machine_spec.machine_type) == (
    4,
    "n1-highcpu-16",
  )
  assert reducers.container_spec.image_uri == reduction_server.IMAGE
  assert not reducers.machine_spec.accelerator_count
  for pool in (chief, workers):
    assert list(pool.container_spec.args) == [
      "--flagfile=configs/cassava_resnet50.cfg",
      "--collective=nccl",
    ]


def test_the_cli_adds_the_pool(capsys):
  exit_code = vertex.main(
    [
      f"--image={_IMAGE}",
      "--num_workers=2",
      "--accelerator_type=NVIDIA_TESLA_V100",
      "--reduction_server_count=2",
      "--reduction_server_machine_type=n1-highcpu-32",
      "--",
      "--collective=nccl",
    ]
  )

  assert exit_code == 0
  spec = yaml.safe_load(capsys.readouterr().out)
  assert spec["workerPoolSpecs"][2]["machineSpec"] == {
    "machineType": "n1-highcpu-32"
  }
  assert spec["workerPoolSpecs"][1]["containerSpec"]["args"] == [
    "--collective=nccl"
  ]


@pytest.mark.processes
def test_the_trainer_accepts_the_collective_it_gets(tmp_path):
  chief = _spec()["workerPoolSpecs"][0]
  result = run_trainer(
    *chief["containerSpec"]["args"],
    "--dry_run",
    check=False,
    env=trainer_env(**vertex_output_env(str(tmp_path))),
  )
  assert result.returncode == 0, result.stderr
  assert '"collective": "nccl"' in result.stdout


@pytest.mark.parametrize(
  "overrides, words",
  [
    ({"num_workers": 1}, "needs num_workers of at least 2"),
    (
      {"accelerator_type": None, "machine_type": "n1-standard-8"},
      "between GPU workers; set --accelerator_type",
    ),
    ({"trainer_args": ["--collective=ring"]}, "runs with --collective=ring"),
    ({"reduction_server_count": -1}, "at least 1, not -1"),
  ],
)
def test_reducers_that_cannot_pay_are_refused(overrides, words):
  with pytest.raises(errors.UserError, match=words):
    _spec(**overrides)


def _without_gpus(spec):
  del spec["workerPoolSpecs"][1]["machineSpec"]["acceleratorType"]
  del spec["workerPoolSpecs"][1]["machineSpec"]["acceleratorCount"]
  spec["workerPoolSpecs"][1]["machineSpec"]["machineType"] = "n1-standard-8"


def _with_ring(spec):
  spec["workerPoolSpecs"][0]["containerSpec"]["args"].append(
    "--collective=ring"
  )


def _gpu_reducers(spec):
  spec["workerPoolSpecs"][2]["machineSpec"].update(
    acceleratorType="NVIDIA_TESLA_T4", acceleratorCount=1
  )


def _no_workers(spec):
  spec["workerPoolSpecs"][1] = {}


def _no_machine(spec):
  del spec["workerPoolSpecs"][2]["machineSpec"]["machineType"]


@pytest.mark.parametrize(
  "edit, words",
  [
    (_without_gpus, "workerPoolSpecs[1] has no accelerators"),
    (_with_ring, "add --collective=nccl to workerPoolSpecs[0]"),
    (_gpu_reducers, "remove its accelerators"),
    (_no_workers, "workerPoolSpecs[1] has no workers"),
    (_no_machine, "workerPoolSpecs[2].machineSpec.machineType is missing"),
  ],
  ids=lambda v: getattr(v, "__name__", ""),
)
def test_a_config_file_whose_reducers_cannot_pay_is_refused(edit, words):
  spec = copy.deepcopy(_spec())
  edit(spec)
  with pytest.raises(errors.UserError) as e:
    vertex_check.validate_job_spec(spec)
  assert words in str(e.value) and str(e.value).endswith(".")
