"""The node agent (`ctl.launch --agent`): two agents on loopback as two nodes.

Each agent is given the TF_CONFIG of one worker of a 2-worker loopback
cluster, as a platform would give each node its own, and runs that worker.
Real trainer processes, real signals; runs are followed through their
progress events (`CTL_EVENTS`).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ctl.launch import spare
from ctl.testing import events as events_lib
from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import free_ports
from tests.conftest import nice_once
from tests.conftest import read_summary
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from tests.test_launch import _assert_all_gone
from tests.test_launch import _launcher_tree
from trainer.testing import finish
from trainer.testing import killed_at_exit
from trainer.testing import output_so_far
from trainer.testing import start

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

STEPS = 60
FLAGS = (
  *FAST_FLAGS,
  "--deterministic",
  f"--train_steps={STEPS}",
  "--steps_per_loop=5",
  "--log_every_steps=5",
  "--checkpoint_every_steps=10",
  "--eval_every_steps=0",
  "--per_replica_batch_size=16",
  "--dropout=0",
)


def two_agents(model_dir, *, flags=FLAGS, agent_flags=()):
  """Two agents, one per "node", sharing one events file, for a `with` block.

  Whatever still runs at the block's end is SIGKILLed (`killed_at_exit`).
  """
  return killed_at_exit(_start_agents(model_dir, flags, agent_flags))


def _start_agents(model_dir, flags, agent_flags):
  addresses = [f"localhost:{port}" for port in free_ports(2)]
  return [
    start(
      [
        sys.executable,
        "-m",
        "ctl.launch",
        "--agent",
        "--max_restarts=3",
        "--restart_backoff_secs=0.5",
        *agent_flags,
        "--",
        *trainer_command(*flags, f"--model_dir={model_dir}"),
      ],
      events=f"{model_dir}.events.jsonl",
      env=trainer_env(
        TF_CONFIG=json.dumps(
          {
            "cluster": {"worker": addresses},
            "task": {"type": "worker", "index": index},
          }
        )
      ),
    )
    for index in (0, 1)
  ]


def trainer_of(events, worker):
  """The process that marked `worker`'s latest progress event."""
  (pid,) = [
    e["pid"] for e in events_lib.read_events(events) if e["worker"] == worker
  ][-1:]
  return psutil.Process(pid)


def spares_of(agent):
  """The agent's children started as spares (ctl.launch.spare), used or not."""
  return [
    p
    for p in psutil.Process(agent.pid).children()
    if "ctl.launch.spare" in p.cmdline()
  ]


def event_pids(events):
  return {e["pid"] for e in events_lib.read_events(events)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The summary of two agents' run that nothing interrupted."""
  model_dir = tmp_path_factory.mktemp("reference") / "run"
  with two_agents(model_dir) as agents:
    for agent in agents:
      code, output = finish(agent)
      assert code == 0, output[-3000:]
  return read_summary(model_dir)


def test_a_killed_worker_is_restarted_in_place_and_ends_identical(
  reference, tmp_path
):
  model_dir = tmp_path / "run"
  events = f"{model_dir}.events.jsonl"
  kill_at = random.Random().choice(range(15, 45, 5))
  with two_agents(model_dir) as agents:
    events_lib.wait_for_step(events, kill_at, process=agents[0])
    trainer_of(events, worker=1).send_signal(signal.SIGKILL)
    for agent in agents:
      code, output = finish(agent)
      assert code == 0, f"killed at step {kill_at}:\n" + output[-3000:]
  summary = read_summary(model_dir)
  assert summary["final_step"] == STEPS
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"], (
    f"worker 1 killed at step {kill_at}"
  )
  # Both workers started again, each under its own agent; none is left.
  assert max(e["attempt"] for e in events_lib.read_events(events)) >= 1
  _assert_all_gone(event_pids(events), timeout=5)


def test_a_warm_spare_takes_the_restart_and_ends_identical(reference, tmp_path):
  model_dir = tmp_path / "run"
  events = f"{model_dir}.events.jsonl"
  kill_at = random.Random().choice(range(15, 45, 5))
  with two_agents(model_dir, agent_flags=("--warm_spare",)) as agents:
    events_lib.wait_for_step(events, kill_at, process=agents[0])
    # Made, warm or still importing at its lowered priority (which, on a
    # busy machine, may outlast this short run): the restart is its.
    while not spares_of(agents[1]):
      assert agents[1].poll() is None, output_so_far(agents[1])[-3000:]
      time.sleep(0.2)
    (warm,) = spares_of(agents[1])
    killed = trainer_of(events, worker=1)
    killed.send_signal(signal.SIGKILL)
    for agent in agents:
      code, output = finish(agent)
      assert code == 0, f"killed at step {kill_at}:\n" + output[-3000:]
  summary = read_summary(model_dir)
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"], (
    f"worker 1 killed at step {kill_at}"
  )
  # Worker 1's restart ran in the spare made before the kill (its
  # interpreter and imports begun while worker 1 trained), not in a new one.
  restarted = {
    e["pid"]
    for e in events_lib.read_events(events)
    if e["worker"] == 1 and e["attempt"] >= 1
  }
  assert warm.pid in restarted and killed.pid not in restarted
  _assert_all_gone(event_pids(events) | {warm.pid}, timeout=5)


@pytest.mark.parametrize("agent_flags", [(), ("--warm_spare",)])
def test_sigkill_to_an_agent_takes_its_worker_with_it(agent_flags, tmp_path):
  model_dir = tmp_path / "run"
  events = f"{model_dir}.events.jsonl"
  with two_agents(
    model_dir, flags=(*FLAGS, "--train_steps=100000"), agent_flags=agent_flags
  ) as agents:
    events_lib.wait_for_step(events, 10, process=agents[1], worker=1)
    # Worker, reaper and, with --warm_spare, the spare.
    tree, heartbeats = _launcher_tree(agents[1].pid)
    assert trainer_of(events, worker=1) in tree and len(heartbeats) == 1
    assert len(spares_of(agents[1])) == len(agent_flags)
    agents[1].kill()
    finish(agents[1])
    _assert_all_gone([p.pid for p in tree], timeout=5)
    assert not any(map(os.path.exists, heartbeats))
    agents[0].send_signal(signal.SIGTERM)  # Its worker is stopped too.
    code, output = finish(agents[0])
    assert code == 128 + signal.SIGTERM, output[-3000:]
  _assert_all_gone(event_pids(events), timeout=5)


def _agent(max_restarts, script, env):
  """Runs an agent over `python -c script` to the end."""
  return subprocess.run(
    [
      sys.executable,
      "-m",
      "ctl.launch",
      "--agent",
      f"--max_restarts={max_restarts}",
      "--restart_backoff_secs=0",
      "--",
      sys.executable,
      "-c",
      script,
    ],
    cwd=REPO,
    env=trainer_env(**env),
    capture_output=True,
    text=True,
    timeout=60,
  )


def test_the_agent_keeps_the_environment_and_exits_with_the_workers_code():
  tf_config = json.dumps(
    {
      "cluster": {"worker": ["node0:2222", "node1:2222"]},
      "task": {"type": "worker", "index": 1},
    }
  )
  result = _agent(
    2,
    "import os, sys; print(os.environ['TF_CONFIG'],"
    " os.environ['CTL_RESTART_COUNT']); sys.exit(7)",
    {"TF_CONFIG": tf_config},
  )
  assert result.returncode == 7, result.stderr
  # Its own output, unprefixed, once per start; the same TF_CONFIG each time.
  assert result.stdout.splitlines() == [f"{tf_config} {n}" for n in range(3)]
  assert "giving up: worker 1 exited with code 7" in result.stderr


def test_an_exit_75_the_watchdog_did_not_record_is_not_called_a_stall():
  """A worker that lost a peer (ctl.PeerLost) or gave up waiting for one
  exits 75 with its own line naming the peer; no heartbeat says it stalled,
  so the agent restarts it without calling it a stall (failed on the old
  supervisor: "worker 0 stalled (exit code 75)", then "stalled twice ...
  the stall is not transient")."""
  result = _agent(1, "import sys; sys.exit(75)", {})
  assert result.returncode == 75, result.stderr
  assert (
    result.stderr.count(
      "worker 0 lost a peer or gave up waiting for one (exit code 75)"
    )
    == 2
  )
  assert (
    "giving up: worker 0 lost a peer or gave up waiting for one"
    in result.stderr
  )
  assert "stalled" not in result.stderr


def _job_ids_of_two_agents(**platform) -> list[str]:
  """The CTL_JOB_ID each of two node agents of one cluster hands its worker,
  started as a platform starts a job's nodes: each with its own TF_CONFIG
  and the `platform` variables, no CTL_JOB_ID."""
  cluster = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
  ids = []
  for index in (0, 1):
    result = _agent(
      0,
      "import os; print(os.environ['CTL_JOB_ID'])",
      {
        "TF_CONFIG": json.dumps(
          {"cluster": cluster, "task": {"type": "worker", "index": index}}
        ),
        "CTL_JOB_ID": "",
        **platform,
      },
    )
    assert result.returncode == 0, result.stderr
    ids.append(result.stdout.strip())
  return ids


def test_every_node_agent_of_a_job_gives_its_worker_the_same_job_id():
  """The job id names the run's local tiers and fences a node agent's
  persist of its dead worker's step against the chief's lease
  (lease.job_fence): every node of a job must have the same one, although
  each node's agent starts on its own."""
  first, second = _job_ids_of_two_agents()
  assert first and first == second
  assert _job_ids_of_two_agents() != [first, second]  # Another cluster.
  assert _job_ids_of_two_agents(CLOUD_ML_JOB_ID="vertex-7") == ["vertex-7"] * 2


def test_an_agent_in_a_malformed_cluster_says_so_in_one_line():
  result = _agent(1, "pass", {"TF_CONFIG": "{not json"})
  assert result.returncode == 2
  assert result.stderr.startswith("error: ") and "TF_CONFIG" in result.stderr
  assert len(result.stderr.splitlines()) == 1


_STEADY_WORKER = """
import json, os, pathlib, sys, time
beat = pathlib.Path(os.environ["CTL_HEARTBEAT_DIR"]) / "worker-0.json"
beat.write_text(json.dumps({"phase": "train_loop", "step": 10,
                            "limit": 600, "deadline": time.monotonic() + 600}))
release = pathlib.Path(sys.argv[1])
while not release.exists():
  time.sleep(0.05)
"""


@pytest.mark.skipif(
  not spare.may_restore_priority(), reason="the spare may not lower itself"
)
def test_once_its_worker_trains_steadily_the_agents_spare_runs_at_full_priority(
  tmp_path,
):
  """A spare lowered for good never got warm on cores its workers kept busy
  (the tiers bench's runs ended first): once the worker's heartbeat says it
  trains past its first loop, the agent lets the spare go on at the agent's
  own priority."""
  (tmp_path / "steady_worker.py").write_text(_STEADY_WORKER)
  release = tmp_path / "release"
  agent = start(
    [
      sys.executable,
      "-m",
      "ctl.launch",
      "--agent",
      "--warm_spare",
      "--max_restarts=1",
      "--",
      sys.executable,
      "-m",
      "steady_worker",
      str(release),
    ],
    events=str(tmp_path / "events.jsonl"),
    env={**trainer_env(), "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"},
  )
  with killed_at_exit([agent]):
    spare_process = _the_spare_of(agent)
    started = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = nice_once(
      spare_process.pid, min(19, started + spare.WARM_UP_NICENESS)
    )
    nice = nice_once(spare_process.pid, started)
    release.touch()
    code, output = finish(agent, timeout=60)
  assert code == 0, output
  assert (lowered, nice) == (min(19, started + spare.WARM_UP_NICENESS), started)


def _the_spare_of(agent, timeout: float = 60) -> psutil.Process:
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    for child in psutil.Process(agent.pid).children(recursive=True):
      if "ctl.launch.spare" in child.cmdline():
        return child
    time.sleep(0.05)
  raise AssertionError("the agent started no spare")
