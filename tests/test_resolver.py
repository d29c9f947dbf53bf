"""Tests for ctl.platform.resolver: which platform's description wins, and
the job id a supervisor or Vertex AI gives."""

from ctl import env
from ctl.distributed import cluster
from ctl.platform import resolver
from ctl.platform import vertex_ai
from tests.test_jobset import _jobset_env
from tests.test_tf_config import resolve_tf_config
from tests.test_vertex_ai import vertex_tf_config


def test_tf_config_wins_over_cluster_spec():
  info = cluster.resolve(
    environ={
      "TF_CONFIG": vertex_tf_config("worker", 1),
      "CLUSTER_SPEC": "not json",
    }
  )
  assert (info.task_type, info.task_index) == ("worker", 1)


def test_tf_config_wins_over_the_jobset_env():
  environ = _jobset_env("chief", 0, 0)
  environ["TF_CONFIG"] = vertex_tf_config("worker", 1)
  assert cluster.resolve(environ=environ) == resolve_tf_config(
    vertex_tf_config("worker", 1)
  )


def test_no_description_is_none():
  assert resolver.cluster_description({"TF_CONFIG": " "}) is None


def test_the_job_id_is_the_supervisors_else_vertex_ais():
  assert resolver.job_id({vertex_ai.JOB_ID: "vertex-1"}) == "vertex-1"
  assert (
    resolver.job_id({env.JOB_ID: "ctl-1", vertex_ai.JOB_ID: "v"}) == "ctl-1"
  )
  assert resolver.job_id({}) == ""


def test_a_blank_job_id_is_no_job_id():
  """A blank CTL_JOB_ID (a variable left as " ") named a job, so a second,
  separate command took over a live trainer as "this job, restarted"."""
  assert resolver.job_id({env.JOB_ID: " \t"}) == ""
  assert resolver.job_id({env.JOB_ID: " ", vertex_ai.JOB_ID: "v"}) == "v"
  assert resolver.job_id({vertex_ai.JOB_ID: "  "}) == ""
  assert resolver.job_id({env.JOB_ID: " ctl-1\n"}) == "ctl-1"
