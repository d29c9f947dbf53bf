"""Tests for ctl.platform.jobset: a JobSet pod's CTL_JOBSET_* variables give
the TF_CONFIG of the same cluster, and a bad one is one sentence."""

import json

import pytest

from ctl.distributed import cluster
from ctl.distributed import environment
from ctl.errors import UserError
from ctl.platform import jobset
from tests.test_tf_config import resolve_tf_config

# A JobSet "train" in subdomain "train": 1 chief, 3 workers in one Job.
JOBSET_HOSTS = {
  "chief": ["train-chief-0-0.train:2222"],
  "worker": [f"train-worker-0-{i}.train:2222" for i in range(3)],
}


def _jobset_env(replicated_job, job_index, pod_index, **changes):
  """The CTL_JOBSET_* env a pod of that JobSet gets from its manifest."""
  environ = {
    jobset.NAME_ENV: "train",
    jobset.REPLICATED_JOB_ENV: replicated_job,
    jobset.JOB_INDEX_ENV: str(job_index),
    jobset.POD_INDEX_ENV: str(pod_index),
    jobset.RESTART_ATTEMPT_ENV: "0",
    jobset.SUBDOMAIN_ENV: "train",
    jobset.JOBS_ENV: "chief=1x1,worker=1x3",
    jobset.PORT_ENV: "2222",
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
  assert from_jobset == resolve_tf_config(tf_config)
  assert cluster.tf_config_json(from_jobset) == cluster.tf_config_json(
    resolve_tf_config(tf_config)
  )


def test_jobset_workers_in_several_jobs_are_ranked_job_by_job():
  environ = _jobset_env("worker", 1, 0, CTL_JOBSET_JOBS="chief=1x1,worker=2x2")
  info = cluster.resolve(environ=environ)
  assert info.workers == tuple(
    f"train-worker-{j}-{p}.train:2222" for j in (0, 1) for p in (0, 1)
  )
  assert (info.task_type, info.task_index) == ("worker", 2)


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


def test_the_restart_attempt_is_a_count_or_none():
  assert jobset.restart_attempt({jobset.RESTART_ATTEMPT_ENV: "2"}) == 2
  assert jobset.restart_attempt({jobset.RESTART_ATTEMPT_ENV: "x"}) is None
  assert jobset.restart_attempt({}) is None


def test_the_jobset_environment():
  pod_env = {
    jobset.NAME_ENV: "train",
    jobset.REPLICATED_JOB_ENV: "worker",
    jobset.JOB_INDEX_ENV: "0",
    jobset.POD_INDEX_ENV: "2",
    jobset.SUBDOMAIN_ENV: "train",
    jobset.JOBS_ENV: "chief=1x1,worker=1x3",
    jobset.PORT_ENV: "2222",
  }
  found = environment.resolve(model_dir="gs://bkt/run", environ=pod_env)
  assert (found.rank, found.num_workers, found.is_chief) == (3, 4, False)
  assert found.cluster.chief == ("train-chief-0-0.train:2222",)
