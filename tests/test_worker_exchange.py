"""ctl.distributed.worker_exchange: who this worker is, and every worker's row
on every worker (two real MultiWorkerMirroredStrategy processes on loopback).
"""

import json
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from ctl.distributed import ports
from ctl.distributed import worker_exchange
from trainer.testing import REPO
from trainer.testing import trainer_env


def test_one_process_is_worker_zero_of_one():
  strategy = tf.distribute.get_strategy()
  assert worker_exchange.worker_index(strategy) == 0
  assert worker_exchange.local_replicas(strategy) == 1
  assert worker_exchange.num_workers(strategy) == 1
  assert worker_exchange.worker_hosts(strategy) == ["localhost"]
  np.testing.assert_array_equal(
    worker_exchange.gather_rows(strategy, [3, 2**40]), [[3, 2**40]]
  )


def test_a_chief_comes_first_then_the_workers():
  spec = tf.train.ClusterSpec(
    {"chief": ["head:2222"], "worker": ["w0:2222", "w1:2223"]}
  )

  def placed(task_type, task_id):
    # Only the strategy's cluster resolver is read.
    strategy = types.SimpleNamespace(
      cluster_resolver=tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type=task_type, task_id=task_id
      )
    )
    return worker_exchange.worker_index(strategy)

  assert [placed("chief", 0), placed("worker", 0), placed("worker", 1)] == [
    0,
    1,
    2,
  ]
  strategy = types.SimpleNamespace(
    cluster_resolver=tf.distribute.cluster_resolver.SimpleClusterResolver(
      spec, task_type="worker", task_id=1
    )
  )
  assert worker_exchange.worker_hosts(strategy) == ["head", "w0", "w1"]


_WORKER = r"""
import json, sys
import tensorflow as tf
from ctl.distributed import worker_exchange
strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = worker_exchange.worker_index(strategy)
table = worker_exchange.gather_rows(strategy, [index + 1, 2**40 + index, -7])
print(json.dumps({
    "index": index,
    "workers": worker_exchange.num_workers(strategy),
    "hosts": worker_exchange.worker_hosts(strategy),
    "table": table.tolist(),
}))
"""


@pytest.mark.processes
def test_every_worker_gets_every_workers_row_exactly():
  workers = [f"localhost:{port}" for port in ports.free_ports(2)]
  processes = [
    subprocess.Popen(
      [sys.executable, "-c", _WORKER],
      cwd=REPO,
      env=trainer_env(
        TF_CONFIG=json.dumps(
          {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
          }
        )
      ),
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for index in (0, 1)
  ]
  found = []
  for process in processes:
    try:
      out, err = process.communicate(timeout=240)
    finally:
      process.kill()
    assert process.returncode == 0, err[-3000:]
    found.append(json.loads(out.splitlines()[-1]))
  expected = [[1, 2**40, -7], [2, 2**40 + 1, -7]]
  for index, result in enumerate(found):
    assert result["index"] == index and result["workers"] == 2
    assert result["hosts"] == ["localhost", "localhost"]
    assert result["table"] == expected
