"""Tests for ctl.distributed.strategies: real strategies on CPU, in and out of process."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from ctl.distributed import cluster
from ctl.distributed import strategies
from ctl.errors import UserError
from tests.conftest import REPO

HAS_GPU = bool(tf.config.list_physical_devices("GPU"))
LOCAL_DEVICE = "GPU:0" if HAS_GPU else "CPU:0"
TWO_WORKERS = cluster.ClusterInfo(
  task_type="worker", task_index=0, workers=("localhost:1", "localhost:2")
)

# Run in fresh processes: they configure devices or join a cluster, which must
# happen before TensorFlow starts its runtime.
REPLICA_SUM = """
import json, sys
import tensorflow as tf
from ctl.distributed import cluster, strategies
{setup}
strategy = strategies.make_strategy(name=sys.argv[1], collective=sys.argv[2],
                                    cluster=cluster.resolve())
ones = strategy.run(lambda: tf.constant(1.0))
total = strategy.reduce("SUM", ones, axis=None)
print(json.dumps({{"class": type(strategy).__name__, "sum": float(total),
                  "replicas": strategy.num_replicas_in_sync,
                  "describe": strategies.describe(strategy)}}))
"""
TWO_LOGICAL_CPUS = """
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
"""


def _python(*args):
  """Runs a fresh Python with `args` on CPU; returns its stdout lines."""
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run(
    [sys.executable, *args],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout.splitlines()


@pytest.fixture(autouse=True)
def _restore_tf_config(monkeypatch):
  """make_strategy("multi_worker") sets TF_CONFIG; undo it after each test."""
  monkeypatch.delenv("TF_CONFIG", raising=False)


def test_one_device_uses_the_first_device():
  strategy = strategies.make_strategy(
    name="one_device", cluster=cluster.ClusterInfo()
  )
  assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
  assert strategy.num_replicas_in_sync == 1
  assert strategy.extended.worker_devices[0].endswith(LOCAL_DEVICE)


@pytest.mark.skipif(HAS_GPU, reason="picks MirroredStrategy with 2+ GPUs")
@pytest.mark.parametrize(
  "info",
  [
    cluster.ClusterInfo(),
    cluster.ClusterInfo(task_type="evaluator", workers=TWO_WORKERS.workers),
  ],
)
def test_auto_on_one_cpu_machine_is_one_device(info):
  strategy = strategies.make_strategy(name="auto", cluster=info)
  assert isinstance(strategy, tf.distribute.OneDeviceStrategy)


def test_multi_worker_alone_installs_an_empty_cluster():
  strategy = strategies.make_strategy(
    name="multi_worker", cluster=cluster.ClusterInfo(), collective="ring"
  )
  assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
  assert strategy.num_replicas_in_sync == 1
  assert json.loads(os.environ["TF_CONFIG"]) == {
    "cluster": {},
    "task": {"type": "chief", "index": 0},
  }


@pytest.mark.parametrize(
  "kwargs, words",
  [
    (dict(name="tpu"), "strategy 'tpu' is not one of"),
    (dict(name="auto", collective="gloo"), "collective 'gloo' is not one"),
    (
      dict(name="mirrored", cluster=TWO_WORKERS),
      "strategy 'mirrored' trains on one machine, but this process is one"
      " of 2 workers",
    ),
    (dict(name="one_device", cluster=TWO_WORKERS), "use 'multi_worker'"),
  ],
)
def test_bad_requests_raise_user_error(kwargs, words):
  kwargs.setdefault("cluster", cluster.ClusterInfo())
  with pytest.raises(UserError, match=words):
    strategies.make_strategy(**kwargs)


@pytest.mark.skipif(HAS_GPU, reason="NCCL is fine with a GPU")
@pytest.mark.parametrize("name", ["mirrored", "multi_worker"])
def test_nccl_without_gpu_is_a_user_error(name):
  with pytest.raises(UserError, match="'nccl' needs a GPU"):
    strategies.make_strategy(
      name=name, cluster=cluster.ClusterInfo(), collective="nccl"
    )


@pytest.mark.parametrize("collective", ["auto", "ring"])
@pytest.mark.processes
def test_mirrored_on_two_logical_cpus(collective):
  [line] = _python(
    "-c", REPLICA_SUM.format(setup=TWO_LOGICAL_CPUS), "mirrored", collective
  )
  result = json.loads(line)
  assert (result["class"], result["replicas"], result["sum"]) == (
    "MirroredStrategy",
    2,
    2.0,
  )
  assert "2 replica(s) in sync" in result["describe"]
  assert "CPU:0" in result["describe"] and "CPU:1" in result["describe"]


@pytest.mark.processes
def test_auto_with_two_local_workers_is_multi_worker():
  lines = _python(
    "-m",
    "ctl.launch",
    "--num_workers=2",
    "--",
    sys.executable,
    "-c",
    REPLICA_SUM.format(setup=""),
    "auto",
    "auto",
  )
  results = sorted(line for line in lines if line.startswith("[worker "))
  assert [line.split("] ", 1)[0] for line in results] == [
    "[worker 0",
    "[worker 1",
  ]
  for line in results:
    result = json.loads(line.split("] ", 1)[1])
    assert (result["class"], result["replicas"], result["sum"]) == (
      tf.distribute.MultiWorkerMirroredStrategy.__name__,
      2,
      2.0,
    )
