"""Tests for ctl.platform.vertex_ai: the cluster, output directories and ids a
Vertex AI worker reads (TF_CONFIG as Vertex AI writes it, CLUSTER_SPEC's
worker pools, AIP_*)."""

import json

import pytest

from ctl.distributed import cluster
from ctl.distributed import environment
from ctl.io import outputs
from ctl.platform import vertex_ai
from tests.test_tf_config import resolve_tf_config
from trainer.testing import vertex_output_env

VERTEX_CHIEF = "cmle-training-workerpool0-ab-0:2222"
VERTEX_WORKERS = [
  "cmle-training-workerpool1-ab-0:2222",
  "cmle-training-workerpool1-ab-1:2222",
]


def vertex_tf_config(task_type, index):
  """TF_CONFIG exactly as Vertex AI sets it for a 1 + 2 replica job."""
  return json.dumps(
    {
      "cluster": {"chief": [VERTEX_CHIEF], "worker": VERTEX_WORKERS},
      "environment": "cloud",
      "task": {"type": task_type, "index": index, "trial": "1"},
      "job": json.dumps(
        {"worker_pool_specs": [{"machine_spec": {"machine_type": "n1"}}]}
      ),
    }
  )


def _vertex_info(task_type, task_index, trial):
  """What `resolve` gives a task of that 1 + 2 replica job."""
  return cluster.ClusterInfo(
    task_type=task_type,
    task_index=task_index,
    chief=(VERTEX_CHIEF,),
    workers=tuple(VERTEX_WORKERS),
    trial=trial,
  )


def test_vertex_chief():
  info = resolve_tf_config(vertex_tf_config("chief", 0))
  assert info == _vertex_info("chief", 0, trial="1")
  assert info.is_chief and info.is_multi_worker and info.num_workers == 3


@pytest.mark.parametrize("index", [0, 1])
def test_vertex_worker_is_not_chief(index):
  info = resolve_tf_config(vertex_tf_config("worker", index))
  assert (info.task_type, info.task_index) == ("worker", index)
  assert not info.is_chief and info.is_multi_worker and info.num_workers == 3


def test_vertex_single_replica_trains_alone():
  info = resolve_tf_config(
    json.dumps(
      {
        "cluster": {"chief": [VERTEX_CHIEF]},
        "environment": "cloud",
        "task": {"type": "chief", "index": 0},
        "job": "{}",
      }
    )
  )
  assert info.is_chief and not info.is_multi_worker and info.num_workers == 1


def test_vertex_cluster_spec_is_the_fallback():
  spec = json.dumps(
    {
      "cluster": {"workerpool0": [VERTEX_CHIEF], "workerpool1": VERTEX_WORKERS},
      "environment": "cloud",
      "task": {"type": "workerpool1", "index": 1, "trial": "3"},
    }
  )
  info = cluster.resolve(environ={"TF_CONFIG": "", "CLUSTER_SPEC": spec})
  assert info == _vertex_info("worker", 1, trial="3")


def test_the_output_directories_are_those_set_by_what_each_holds():
  environ = {"AIP_MODEL_DIR": "gs://b/model/", "AIP_CHECKPOINT_DIR": ""}
  assert vertex_ai.output_dirs(environ) == {"model": "gs://b/model/"}
  assert vertex_ai.output_dirs({}) == {}


def test_the_ids_are_none_or_empty_outside_vertex_ai():
  environ = {
    vertex_ai.JOB_ID: "42",
    vertex_ai.TRIAL_ID: "3",
    vertex_ai.PROJECT_ID: "p",
  }
  assert vertex_ai.job_id(environ) == "42" and vertex_ai.job_id({}) == ""
  assert vertex_ai.trial_id(environ) == "3" and vertex_ai.trial_id({}) is None
  assert vertex_ai.project_id(environ) == "p"
  assert vertex_ai.project_id({}) is None


def test_vertex_cluster_spec_and_aip_dirs():
  spec = {
    "cluster": {
      "workerpool0": ["cmle-training-workerpool0-0:2222"],
      "workerpool1": ["cmle-training-workerpool1-0:2222"],
    },
    "task": {"type": "workerpool1", "index": 0},
  }
  found = environment.resolve(
    environ={
      "CLUSTER_SPEC": json.dumps(spec),
      vertex_ai.JOB_ID: "vertex-42",
      **vertex_output_env("gs://bkt/out"),
    }
  )
  assert (found.rank, found.num_workers, found.is_chief) == (1, 2, False)
  assert found.job_id == "vertex-42"
  assert found.dirs == outputs.OutputDirs(
    model_dir="gs://bkt/out",
    checkpoint_dir="gs://bkt/out/checkpoints",
    tensorboard_dir="gs://bkt/out/logs",
    export_dir="gs://bkt/out/model",
  )


def test_a_tuning_trial_writes_below_its_own_directory():
  found = environment.resolve(
    model_dir="gs://bkt/tune", environ={"CLOUD_ML_TRIAL_ID": "3"}
  )
  assert found.dirs.model_dir == "gs://bkt/tune/trial_3"
