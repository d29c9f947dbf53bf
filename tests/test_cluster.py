"""Tests for ctl.distributed.cluster: every TF_CONFIG dialect and every error."""

import json

import pytest

from ctl.distributed import cluster
from ctl.errors import UserError
from trainer.testing import FAST_FLAGS
from trainer.testing import run_trainer
from trainer.testing import trainer_env

VERTEX_CHIEF = "cmle-training-workerpool0-ab-0:2222"
VERTEX_WORKERS = [
  "cmle-training-workerpool1-ab-0:2222",
  "cmle-training-workerpool1-ab-1:2222",
]


def _vertex_tf_config(task_type, index):
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


def _resolve(value, var="TF_CONFIG"):
  return cluster.resolve(environ={var: value})


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


def test_vertex_chief():
  info = _resolve(_vertex_tf_config("chief", 0))
  assert info == _vertex_info("chief", 0, trial="1")
  assert info.is_chief and info.is_multi_worker and info.num_workers == 3


@pytest.mark.parametrize("index", [0, 1])
def test_vertex_worker_is_not_chief(index):
  info = _resolve(_vertex_tf_config("worker", index))
  assert (info.task_type, info.task_index) == ("worker", index)
  assert not info.is_chief and info.is_multi_worker and info.num_workers == 3


def test_vertex_single_replica_trains_alone():
  info = _resolve(
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


def test_tutorial_shape_worker_zero_is_chief():
  workers = ["localhost:12345", "localhost:23456"]
  infos = [
    _resolve(
      json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
      )
    )
    for i in range(2)
  ]
  assert [info.is_chief for info in infos] == [True, False]
  assert all(info.num_workers == 2 and info.is_multi_worker for info in infos)


def test_ai_platform_master_is_chief():
  info = _resolve(
    json.dumps(
      {
        "cluster": {"master": ["m:2222"], "worker": ["w:2222"]},
        "task": {"type": "master", "index": 0},
        "environment": "cloud",
      }
    )
  )
  assert info.task_type == "chief" and info.chief == ("m:2222",)
  assert info.is_chief and info.num_workers == 2


def test_evaluator_is_not_a_training_worker():
  info = _resolve(
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
  with_evaluator = _resolve(
    json.dumps(
      {
        "cluster": {"chief": ["c:1"], "evaluator": ["e:1"]},
        "task": {"type": "chief", "index": 0},
      }
    )
  )
  assert with_evaluator.is_chief and with_evaluator.has_evaluator
  assert not _resolve(
    json.dumps(
      {
        "cluster": {"chief": ["c:1"], "worker": ["w:1"]},
        "task": {"type": "chief", "index": 0},
      }
    )
  ).has_evaluator


def test_evaluator_may_be_missing_from_cluster():
  info = _resolve(
    json.dumps(
      {
        "cluster": {"chief": ["c:1"], "worker": ["w:1"]},
        "task": {"type": "evaluator", "index": 0},
      }
    )
  )
  assert info.is_evaluator


def test_single_listed_task_needs_no_task_field():
  info = _resolve('{"cluster": {"worker": ["localhost:1"]}}')
  assert info.task_type == "worker" and info.is_chief
  assert info.num_workers == 1


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


def test_tf_config_wins_over_cluster_spec():
  info = cluster.resolve(
    environ={
      "TF_CONFIG": _vertex_tf_config("worker", 1),
      "CLUSTER_SPEC": "not json",
    }
  )
  assert (info.task_type, info.task_index) == ("worker", 1)


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
    _resolve(value, var=var)
  assert words in str(e.value)


def test_tf_config_json_maps_master_and_drops_extras():
  info = _resolve(
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
  info = _resolve(_vertex_tf_config("worker", 1))
  assert _resolve(cluster.tf_config_json(info)) == info


def test_tf_config_json_gives_lone_processes_no_cluster():
  lone = _resolve('{"cluster": {"worker": ["a:1"]}}')
  evaluator = _resolve(
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
  assert _resolve(cluster.tf_config_json(evaluator)).is_evaluator


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


# A JobSet "train" in subdomain "train": 1 chief, 3 workers in one Job.
JOBSET_HOSTS = {
  "chief": ["train-chief-0-0.train:2222"],
  "worker": [f"train-worker-0-{i}.train:2222" for i in range(3)],
}


def _jobset_env(replicated_job, job_index, pod_index, **changes):
  """The CTL_JOBSET_* env a pod of that JobSet gets from its manifest."""
  environ = {
    cluster.JOBSET_NAME_ENV: "train",
    cluster.JOBSET_REPLICATED_JOB_ENV: replicated_job,
    cluster.JOBSET_JOB_INDEX_ENV: str(job_index),
    cluster.JOBSET_POD_INDEX_ENV: str(pod_index),
    cluster.JOBSET_RESTART_ATTEMPT_ENV: "0",
    cluster.JOBSET_SUBDOMAIN_ENV: "train",
    cluster.JOBSET_JOBS_ENV: "chief=1x1,worker=1x3",
    cluster.JOBSET_PORT_ENV: "2222",
  }
  environ.update(changes)
  return {k: v for k, v in environ.items() if v is not None}


@pytest.mark.parametrize(
  "replicated_job, pod_index, task_type, task_index",
  [
    ("chief", 0, "chief", 0),
    ("worker", 0, "worker", 0),
    ("worker", 2, "worker", 2),
  ],
)
def test_jobset_env_gives_the_tf_config_of_the_same_cluster(
  replicated_job, pod_index, task_type, task_index
):
  from_jobset = cluster.resolve(
    environ=_jobset_env(replicated_job, 0, pod_index)
  )
  tf_config = json.dumps(
    {"cluster": JOBSET_HOSTS, "task": {"type": task_type, "index": task_index}}
  )
  assert from_jobset == _resolve(tf_config)
  assert cluster.tf_config_json(from_jobset) == cluster.tf_config_json(
    _resolve(tf_config)
  )


def test_jobset_workers_in_several_jobs_are_ranked_job_by_job():
  environ = _jobset_env("worker", 1, 0, CTL_JOBSET_JOBS="chief=1x1,worker=2x2")
  info = cluster.resolve(environ=environ)
  assert info.workers == tuple(
    f"train-worker-{j}-{p}.train:2222" for j in (0, 1) for p in (0, 1)
  )
  assert (info.task_type, info.task_index) == ("worker", 2)


def test_tf_config_wins_over_the_jobset_env():
  environ = _jobset_env("chief", 0, 0)
  environ["TF_CONFIG"] = _vertex_tf_config("worker", 1)
  assert cluster.resolve(environ=environ) == _resolve(
    _vertex_tf_config("worker", 1)
  )


@pytest.mark.parametrize(
  "changes, words",
  [
    ({"CTL_JOBSET_SUBDOMAIN": None}, "lacks CTL_JOBSET_SUBDOMAIN"),
    ({"CTL_JOBSET_POD_INDEX": "x"}, "CTL_JOBSET_POD_INDEX must be a non-neg"),
    ({"CTL_JOBSET_PORT": "70000"}, "must be a port"),
    ({"CTL_JOBSET_JOBS": "chief=1,worker=1x3"}, "is not NAME=REPLICASxPODS"),
    ({"CTL_JOBSET_JOBS": "chief=1x1,gpu=1x3"}, "unknown replicated job 'gpu'"),
    ({"CTL_JOBSET_JOBS": "chief=1x1,chief=1x1"}, "lists the chief job twice"),
    ({"CTL_JOBSET_JOBS": "chief=1x1"}, "'worker' is not in CTL_JOBSET_JOBS"),
    ({"CTL_JOBSET_POD_INDEX": "3"}, "out of range for its 1x3 pods"),
    ({"CTL_JOBSET_JOBS": "chief=2x1,worker=1x3"}, "at most one chief"),
  ],
)
def test_bad_jobset_env_is_one_sentence(changes, words):
  with pytest.raises(UserError) as e:
    cluster.resolve(environ=_jobset_env("worker", 0, 0, **changes))
  assert words in str(e.value) and str(e.value).endswith(".")


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
