"""Tests for ctl.distributed.cluster: the cluster a TF_CONFIG describes, every
error, and the TF_CONFIG TensorFlow is handed (each platform's dialect is
tested in its own file: test_tf_config, test_vertex_ai, test_jobset)."""

import json

import pytest

from ctl.distributed import cluster
from ctl.errors import UserError
from tests.test_tf_config import resolve_tf_config
from tests.test_vertex_ai import vertex_tf_config
from trainer.testing import FAST_FLAGS
from trainer.testing import run_trainer
from trainer.testing import trainer_env


@pytest.mark.parametrize(
  "environ",
  [
    {},
    {"TF_CONFIG": ""},
    {"TF_CONFIG": "  "},
    {"TF_CONFIG": "{}"},
    {"TF_CONFIG": '{"cluster": {}}'},
    {"TF_CONFIG": '{"environment": "cloud"}'},
  ],
)
def test_no_cluster_is_a_lone_chief(environ):
  info = cluster.resolve(environ=environ)
  assert info == cluster.ClusterInfo(task_type="chief", task_index=0)
  assert info.is_chief and not info.is_multi_worker and not info.is_evaluator
  assert info.num_workers == 1


def test_evaluator_is_not_a_training_worker():
  info = resolve_tf_config(
    json.dumps(
      {
        "cluster": {"chief": ["c:1"], "worker": ["w:1"], "evaluator": ["e:1"]},
        "task": {"type": "evaluator", "index": 0},
      }
    )
  )
  assert info.is_evaluator and not info.is_chief and not info.is_multi_worker
  assert info.num_workers == 2


def test_the_chief_knows_whether_an_evaluator_writes_validation():
  """With an evaluator, the chief leaves <tensorboard_dir>/validation to it."""
  with_evaluator = resolve_tf_config(
    json.dumps(
      {
        "cluster": {"chief": ["c:1"], "evaluator": ["e:1"]},
        "task": {"type": "chief", "index": 0},
      }
    )
  )
  assert with_evaluator.is_chief and with_evaluator.has_evaluator
  assert not resolve_tf_config(
    json.dumps(
      {
        "cluster": {"chief": ["c:1"], "worker": ["w:1"]},
        "task": {"type": "chief", "index": 0},
      }
    )
  ).has_evaluator


def test_evaluator_may_be_missing_from_cluster():
  info = resolve_tf_config(
    json.dumps(
      {
        "cluster": {"chief": ["c:1"], "worker": ["w:1"]},
        "task": {"type": "evaluator", "index": 0},
      }
    )
  )
  assert info.is_evaluator


def test_single_listed_task_needs_no_task_field():
  info = resolve_tf_config('{"cluster": {"worker": ["localhost:1"]}}')
  assert info.task_type == "worker" and info.is_chief
  assert info.num_workers == 1


@pytest.mark.parametrize(
  "value, words",
  [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"cluster": ["a:1"]}', "'cluster' must be a JSON object"),
    ('{"cluster": {"worker": "a:1"}}', "must be a list of 'host:port'"),
    (
      '{"cluster": {"worker": ["a:1"]}, "task": "worker"}',
      "'task' must be a JSON object",
    ),
    ('{"cluster": {"gpu": ["a:1"]}}', "unknown cluster job 'gpu'"),
    (
      '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "boss"}}',
      "unknown task type 'boss'",
    ),
    (
      '{"cluster": {"worker": ["a:1", "b:1"]},'
      ' "task": {"type": "worker", "index": 2}}',
      "task index 2 is out of range",
    ),
    (
      '{"cluster": {"worker": ["a:1", "b:1"]},'
      ' "task": {"type": "worker", "index": -1}}',
      "task index -1 is out of range",
    ),
    (
      '{"cluster": {"worker": ["a:1", "b:1"]},'
      ' "task": {"type": "worker", "index": "1"}}',
      "task index must be an integer",
    ),
    ('{"cluster": {"worker": ["a:1", "b:1"]}}', "has no 'task'"),
    (
      '{"cluster": {"worker": ["a:1", "b:1"]},'
      ' "task": {"type": "chief", "index": 0}}',
      "task type 'chief' has no job",
    ),
    (
      '{"cluster": {"chief": ["a:1"], "master": ["b:1"]},'
      ' "task": {"type": "chief", "index": 0}}',
      "lists the chief job twice",
    ),
    (
      '{"cluster": {"chief": ["a:1", "b:1"]},'
      ' "task": {"type": "chief", "index": 0}}',
      "at most one chief",
    ),
    (
      '{"cluster": {"worker": ["a:1"], "evaluator": ["b:1", "c:1"]},'
      ' "task": {"type": "worker", "index": 0}}',
      "at most one evaluator",
    ),
    (
      '{"cluster": {"worker": ["a:1"], "ps": ["p:1"]},'
      ' "task": {"type": "worker", "index": 0}}',
      "parameter server",
    ),
    ('{"task": {"type": "ps", "index": 0}}', "parameter server"),
    (
      '{"cluster": {"worker": ["a:1", "b:1", "a:1"]},'
      ' "task": {"type": "worker", "index": 0}}',
      "gives the address a:1 to both worker 0 and worker 2",
    ),
    (
      '{"cluster": {"chief": ["a:1"], "worker": ["b:1", "A:1"]},'
      ' "task": {"type": "worker", "index": 1}}',
      "gives the address A:1 to both chief 0 and worker 1",
    ),
  ],
)
@pytest.mark.parametrize("var", ["TF_CONFIG", "CLUSTER_SPEC"])
def test_bad_config_names_the_variable(var, value, words):
  with pytest.raises(UserError, match=f"^{var} ") as e:
    resolve_tf_config(value, var=var)
  assert words in str(e.value)


def test_tf_config_json_maps_master_and_drops_extras():
  info = resolve_tf_config(
    json.dumps(
      {
        "cluster": {"master": ["m:1"], "worker": ["w:1"], "evaluator": ["e:1"]},
        "task": {"type": "worker", "index": 0},
        "environment": "cloud",
        "job": "{}",
      }
    )
  )
  assert json.loads(cluster.tf_config_json(info)) == {
    "cluster": {"chief": ["m:1"], "worker": ["w:1"]},
    "task": {"type": "worker", "index": 0},
  }


def test_tf_config_json_reads_back_the_same():
  info = resolve_tf_config(vertex_tf_config("worker", 1))
  assert resolve_tf_config(cluster.tf_config_json(info)) == info


def test_tf_config_json_gives_lone_processes_no_cluster():
  lone = resolve_tf_config('{"cluster": {"worker": ["a:1"]}}')
  evaluator = resolve_tf_config(
    json.dumps(
      {
        "cluster": {"worker": ["a:1", "b:1"], "evaluator": ["e:1"]},
        "task": {"type": "evaluator", "index": 0},
      }
    )
  )
  assert json.loads(cluster.tf_config_json(lone))["cluster"] == {}
  assert json.loads(cluster.tf_config_json(evaluator)) == {
    "cluster": {},
    "task": {"type": "evaluator", "index": 0},
  }
  assert resolve_tf_config(cluster.tf_config_json(evaluator)).is_evaluator


def test_install_tf_config_sets_the_variable():
  environ = {
    "CLUSTER_SPEC": json.dumps(
      {
        "cluster": {"workerpool0": ["c:1"], "workerpool1": ["w:1"]},
        "task": {"type": "workerpool0", "index": 0},
      }
    )
  }
  info = cluster.resolve(environ=environ)
  cluster.install_tf_config(info, environ=environ)
  assert json.loads(environ["TF_CONFIG"]) == {
    "cluster": {"chief": ["c:1"], "worker": ["w:1"]},
    "task": {"type": "chief", "index": 0},
  }
  assert cluster.resolve(environ=environ) == info


@pytest.mark.processes
def test_one_address_for_two_tasks_stops_the_trainer_before_tensorflow(
  tmp_path,
):
  """This worker's address twice in TF_CONFIG: start-up used to block in
  MultiWorkerMirroredStrategy until the backstop killed it (exit 137, which
  a supervisor restarts). Now one sentence, exit 2, nothing written."""
  config = {
    "cluster": {"chief": ["localhost:1"], "worker": ["localhost:1"]},
    "task": {"type": "chief", "index": 0},
  }
  model_dir = tmp_path / "run"
  result = run_trainer(
    *FAST_FLAGS,
    "--train_steps=20",
    "--startup_timeout_secs=30",  # Before: blocked until its backstop.
    f"--model_dir={model_dir}",
    env=trainer_env(TF_CONFIG=json.dumps(config)),
    check=False,
  )
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
    "error: TF_CONFIG gives the address localhost:1 to both chief 0 and "
    "worker 0; each task needs its own host:port."
  )
  assert not model_dir.exists()
