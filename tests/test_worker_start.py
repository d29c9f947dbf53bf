"""ctl.environment's worker start (ctl.resilience.worker_start) in real
processes: a user's script (examples/regression.py) against a real lease
holder and a peer that answers."""

import json
import os
import socket
import subprocess
import sys

import pytest

from ctl import errors
from ctl.distributed.ports import free_ports
from tests.conftest import REPO
from tests.conftest import lease_record
from tests.conftest import trainer_env


@pytest.mark.processes
def test_a_scripts_chief_replaced_by_a_live_one_stops_before_its_cluster_forms(
  lease_holder, tmp_path
):
  """Issue 55 with a user's script: as the trainer's chief in
  tests/test_lease.py's
  test_a_chief_whose_job_goes_on_under_a_live_holder_stops_with_77, a
  `ctl.environment` chief restarted after its job went on without it (a new
  chief of the same job holds the lease and renews it; its worker answers)
  must end with 77 before its cluster forms. It waited in TensorFlow's
  formation instead, where no thread runs, until its start-up limit (900 s
  by default) ended it: `ctl.environment` had no start-up check."""
  model_dir = str(tmp_path / "run")
  holder = lease_holder(model_dir, job="j", stale_secs=120.0, host="elsewhere")
  with socket.socket() as peer:  # The new chief's worker 1: it answers.
    peer.bind(("localhost", 0))
    peer.listen()
    cluster = {
      "worker": [
        f"localhost:{free_ports(1)[0]}",
        f"localhost:{peer.getsockname()[1]}",
      ]
    }
    old = subprocess.run(
      [
        sys.executable,
        os.path.join(REPO, "examples", "regression.py"),
        f"--model_dir={model_dir}",
      ],
      cwd=REPO,
      env=trainer_env(
        CTL_JOB_ID="j",
        TF_CONFIG=json.dumps(
          {"cluster": cluster, "task": {"type": "worker", "index": 0}}
        ),
      ),
      capture_output=True,
      text=True,
      timeout=120,
    )
  assert old.returncode == errors.LEASE_LOST_EXIT_CODE, old.stderr[-3000:]
  last = old.stderr.strip().splitlines()[-1]
  assert last.startswith("error: This trainer (pid "), last
  assert f"pid {holder.pid} on elsewhere, job j" in last, last
  assert lease_record(model_dir)["pid"] == holder.pid  # It wrote nothing.
