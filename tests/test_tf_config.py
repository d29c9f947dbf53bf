"""Tests for ctl.platform.tf_config: each platform's job names in TF_CONFIG
mean one job (the tutorial's workers, AI Platform's master)."""

import json

from ctl.distributed import cluster


def resolve_tf_config(value, var="TF_CONFIG"):
  """The cluster a TF_CONFIG (or `var`) of that JSON text describes."""
  return cluster.resolve(environ={var: value})


def test_tutorial_shape_worker_zero_is_chief():
  workers = ["localhost:12345", "localhost:23456"]
  infos = [
    resolve_tf_config(
      json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
      )
    )
    for i in range(2)
  ]
  assert [info.is_chief for info in infos] == [True, False]
  assert all(info.num_workers == 2 and info.is_multi_worker for info in infos)


def test_ai_platform_master_is_chief():
  info = resolve_tf_config(
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
