"""Tests for ctl.launch with real worker processes and real signals."""

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from ctl import env
from ctl.launch import supervisor
from ctl.testing import events as events_lib
from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import trainer_command
from trainer.testing import finish
from trainer.testing import start

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

REPO_ROOT = pathlib.Path(REPO)
DEADLINE_SECS = 60  # Generous bound for a busy 2-core machine; never reached.

# Prepended to every worker script; the worker gets the output dir as argv[1].
PRELUDE = """
import json, os, pathlib, signal, subprocess, sys, time
out = pathlib.Path(sys.argv[1])
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
restart = int(os.environ["CTL_RESTART_COUNT"])

def publish(name, text):  # Atomic, so the test never reads half a file.
  tmp = out / f"{name}.tmp"
  tmp.write_text(str(text))
  tmp.rename(out / name)

def note(name, text):
  with open(out / name, "a") as f:
    f.write(f"{text}\\n")

def wait_for(name):
  while not (out / name).exists():
    time.sleep(0.05)
"""


def _command(flags, script, out_dir):
  return [
    sys.executable,
    "-m",
    "ctl.launch",
    *flags,
    "--",
    sys.executable,
    "-c",
    PRELUDE + script,
    str(out_dir),
  ]


def _launch(flags, script, out_dir):
  """Runs the launcher to the end; returns the finished process."""
  return subprocess.run(
    _command(flags, script, out_dir),
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=DEADLINE_SECS,
  )


def _start_launcher(flags, script, out_dir):
  return subprocess.Popen(
    _command(flags, script, out_dir),
    cwd=REPO_ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _wait_for_files(out_dir, names, launcher):
  """Waits until the workers published `names`; returns their int contents."""
  deadline = time.monotonic() + DEADLINE_SECS
  paths = [out_dir / name for name in names]
  while not all(p.exists() for p in paths):
    assert launcher.poll() is None, launcher.communicate()
    assert time.monotonic() < deadline, "workers never published their pids"
    time.sleep(0.05)
  return [int(p.read_text()) for p in paths]


def _is_alive(pid):
  """True unless `pid` is gone or a zombie (dead, not yet reaped by init)."""
  try:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
  except FileNotFoundError:
    return False
  return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _assert_all_gone(pids, timeout=DEADLINE_SECS):
  """Asserts every pid dies within `timeout` s; SIGKILL is asynchronous."""
  deadline = time.monotonic() + timeout
  while any(_is_alive(pid) for pid in pids) and time.monotonic() < deadline:
    time.sleep(0.05)
  assert [pid for pid in pids if _is_alive(pid)] == []


def test_each_worker_gets_its_tf_config_and_prefixed_output(tmp_path):
  result = _launch(
    ["--num_workers=3"],
    """
print(os.environ["TF_CONFIG"])
print(f"restart={restart}", file=sys.stderr, end="")  # No final newline.
""",
    tmp_path,
  )
  assert result.returncode == 0, result.stderr
  configs = {}
  for line in result.stdout.splitlines():
    prefix, config = line.split("] ", 1)
    configs[int(prefix.removeprefix("[worker "))] = json.loads(config)
  addresses = configs[0]["cluster"]["worker"]
  assert len(set(addresses)) == 3
  assert all(a.startswith("localhost:") for a in addresses)
  assert configs == {
    i: {
      "cluster": {"worker": addresses},
      "task": {"type": "worker", "index": i},
    }
    for i in range(3)
  }
  assert sorted(result.stderr.splitlines()) == [
    f"[worker {i}] restart=0" for i in range(3)
  ]


def test_port_base_sets_the_ports(tmp_path):
  result = _launch(
    ["--num_workers=2", "--port_base=23450"],
    'print(os.environ["TF_CONFIG"])',
    tmp_path,
  )
  assert result.returncode == 0, result.stderr
  config = json.loads(result.stdout.splitlines()[0].split("] ", 1)[1])
  assert config["cluster"]["worker"] == ["localhost:23450", "localhost:23451"]


def test_failure_stops_the_others_and_sets_the_exit_code(tmp_path):
  result = _launch(
    ["--num_workers=3"],
    """
if index == 2:
  wait_for("pid0"); wait_for("pid1")
  sys.exit(3)
publish(f"pid{index}", os.getpid())
time.sleep(600)
""",
    tmp_path,
  )
  assert result.returncode == 3, result.stderr
  assert "sending SIGTERM to 2 running worker(s)" in result.stderr
  assert "giving up: worker 2 exited with code 3" in result.stderr
  _assert_all_gone([int((tmp_path / f"pid{i}").read_text()) for i in (0, 1)])


def test_a_worker_killed_by_sigkill_has_the_others_killed_at_once(tmp_path):
  """Worker 0 stands for a survivor whose SIGTERM starts an agreed save
  that cannot complete without its dead peer: it must not be asked."""
  result = _launch(
    ["--num_workers=2", "--max_restarts=0"],
    """
def on_term(signum, frame):
  note(f"got{index}", signal.Signals(signum).name)
  time.sleep(5)  # The doomed save.
  sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
publish(f"pid{index}", os.getpid())
if index == 1:
  wait_for("pid0")
  os.kill(os.getpid(), signal.SIGKILL)
time.sleep(600)
""",
    tmp_path,
  )
  assert result.returncode == 128 + signal.SIGKILL, result.stderr
  assert "worker 1 was killed by signal 9" in result.stderr
  assert "sending SIGKILL to 1 running worker(s)" in result.stderr
  assert not (tmp_path / "got0").exists()
  _assert_all_gone([int((tmp_path / "pid0").read_text())])


def test_restarts_the_cluster_until_it_succeeds(tmp_path):
  result = _launch(
    ["--num_workers=2", "--max_restarts=3", "--restart_backoff_secs=0"],
    """
note(f"runs{index}", restart)
if index == 1:
  note("pids1", os.getpid())
  publish(f"started{restart}", 1)
  if restart < 2:
    time.sleep(600)  # Must be stopped when worker 0 fails.
elif restart == 0:
  wait_for("started0")
  os.kill(os.getpid(), signal.SIGKILL)
elif restart == 1:
  wait_for("started1")
  sys.exit(143)  # Preempted, checkpoint saved.
""",
    tmp_path,
  )
  assert result.returncode == 0, result.stderr
  assert "restart 1/3 after worker 0 exited with code -9" in result.stderr
  assert "restart 2/3 after worker 0 exited with code 143" in result.stderr
  assert "restart 3/3" not in result.stderr
  for index in (0, 1):
    assert (tmp_path / f"runs{index}").read_text().split() == ["0", "1", "2"]
  _assert_all_gone([int(p) for p in (tmp_path / "pids1").read_text().split()])


@pytest.mark.parametrize(
  "max_restarts, code, messages, runs",
  [
    pytest.param(
      1,
      7,
      (
        "restart 1/1 after worker 1 exited with code 7",
        "giving up: worker 1 exited with code 7 and all 1 restart(s)",
      ),
      ["0", "1"],
      id="gives_up_after_max_restarts",
    ),
    pytest.param(
      3,
      2,
      ("not restarting: worker 1 exited with code 2",),
      ["0"],
      id="a_user_error_is_not_restarted",
    ),
    pytest.param(
      3,
      77,
      ("not restarting: worker 1 exited with code 77",),
      ["0"],
      id="a_writer_whose_lease_was_taken_over_is_not_restarted",
    ),
  ],
)
def test_a_failing_worker_ends_the_job(
  tmp_path, max_restarts, code, messages, runs
):
  result = _launch(
    [
      "--num_workers=2",
      f"--max_restarts={max_restarts}",
      "--restart_backoff_secs=0",
    ],
    f"""
note(f"runs{{index}}", restart)
sys.exit({code} if index == 1 else 0)
""",
    tmp_path,
  )
  assert result.returncode == code, result.stderr
  for message in messages:
    assert message in result.stderr
  assert (tmp_path / "runs1").read_text().split() == runs


def test_sigterm_is_forwarded_to_every_worker(tmp_path):
  launcher = _start_launcher(
    ["--num_workers=2"],
    """
def on_term(signum, frame):
  note(f"got{index}", signal.Signals(signum).name)
  sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
publish(f"pid{index}", os.getpid())
time.sleep(600)
""",
    tmp_path,
  )
  pids = _wait_for_files(tmp_path, ["pid0", "pid1"], launcher)
  launcher.send_signal(signal.SIGTERM)
  _, stderr = launcher.communicate(timeout=DEADLINE_SECS)
  assert launcher.returncode == 128 + signal.SIGTERM, stderr
  for i in (0, 1):
    assert (tmp_path / f"got{i}").read_text() == "SIGTERM\n"
  _assert_all_gone(pids)


def test_no_process_survives_workers_that_ignore_signals(tmp_path):
  launcher = _start_launcher(
    ["--num_workers=2", "--grace_secs=1"],
    """
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen(["sleep", "600"])  # Inherits the ignored signals.
publish(f"child{index}", child.pid)
publish(f"pid{index}", os.getpid())
time.sleep(600)
""",
    tmp_path,
  )
  pids = _wait_for_files(
    tmp_path, ["pid0", "pid1", "child0", "child1"], launcher
  )
  launcher.send_signal(signal.SIGINT)
  _, stderr = launcher.communicate(timeout=DEADLINE_SECS)
  assert launcher.returncode == 128 + signal.SIGINT, stderr
  assert "sending SIGINT to 2 running worker(s)" in stderr
  _assert_all_gone(pids)


@contextlib.contextmanager
def _a_free_port_then_a_busy_one():
  """Yields consecutive ports p, p + 1, both held until the block ends.

  p is bound with SO_REUSEADDR and not listened on: the launcher's check,
  which binds as a server does, finds it free, while a process that asks
  for a free port is never given it. p + 1 is listened on: in use.
  """
  for _ in range(100):
    free = socket.socket()
    free.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    free.bind(("", 0))
    busy = socket.socket()
    with free, busy:
      port = free.getsockname()[1]
      try:
        busy.bind(("localhost", port + 1))
      except OSError:  # Another process holds p + 1: try another p.
        continue
      busy.listen()
      yield port, port + 1
      return
  raise AssertionError("found no two consecutive free ports")


def test_a_port_base_already_in_use_is_named_before_any_worker_starts(
  tmp_path,
):
  with _a_free_port_then_a_busy_one() as (port_base, port):
    result = _launch(
      ["--num_workers=2", f"--port_base={port_base}"],
      'note("started", index)',
      tmp_path,
    )
  assert result.returncode == 2, result.stderr
  assert result.stderr.startswith("error: ") and "Traceback" not in (
    result.stderr
  )
  assert f"port {port} " in result.stderr, result.stderr
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr
  assert not (tmp_path / "started").exists()


@pytest.mark.parametrize(
  "argv, words",
  [
    (["--num_workers=0", "--", "true"], "--num_workers must be at least 1"),
    (["--", "true"], "give --num_workers=N"),
    (["--agent", "--num_workers=2", "--", "true"], "drop --num_workers"),
    (["--num_workers=2"], "no worker command given"),
    (["--num_workers=2", "--port_base=65535", "--", "true"], "--port_base"),
    (["--num_workers=1", "--max_restarts=-1", "--", "true"], "--max_restarts"),
    (["--num_workers=1", "--grace_secs=-1", "--", "true"], "--grace_secs"),
    (
      ["--num_workers=1", "--", "/no/such/command"],
      "cannot run worker command '/no/such/command'",
    ),
  ],
)
def test_user_errors_exit_2_with_one_line(argv, words):
  result = subprocess.run(
    [sys.executable, "-m", "ctl.launch", *argv],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=DEADLINE_SECS,
  )
  assert result.returncode == 2
  assert result.stderr.startswith("error: ") and words in result.stderr
  assert "Traceback" not in result.stderr


def test_a_worker_past_its_heartbeat_deadline_is_stopped_as_stalled(tmp_path):
  # Worker 1 writes the heartbeat of a watchdog that can no longer act.
  result = _launch(
    [
      "--num_workers=2",
      "--max_restarts=1",
      "--restart_backoff_secs=0",
      "--heartbeat_grace_secs=0",
    ],
    """
note(f"runs{index}", restart)
if index == 1 and restart == 0:
  beat = pathlib.Path(os.environ["CTL_HEARTBEAT_DIR"]) / "worker-1.json"
  beat.write_text(json.dumps({"phase": "train_loop", "step": 340,
                              "limit": 5, "deadline": time.monotonic() - 1}))
  time.sleep(600)
""",
    tmp_path,
  )
  assert result.returncode == 0, result.stderr
  assert (
    "[launcher] worker 1 made no progress for" in result.stderr
    and "in train_loop at step 340 and its watchdog did not act"
    in result.stderr
  )
  assert (
    "[launcher] worker 1 stalled at step 340 in train_loop (exit code"
    " 75)" in result.stderr
  )
  assert (tmp_path / "runs1").read_text().split() == ["0", "1"]


def test_many_restarts_with_no_backoff_pause_and_never_overflow():
  # (The pause itself: tests/test_supervisor.py.) A worker that always fails at once, restarted "for ever" with no backoff.
  launcher = subprocess.Popen(
    [
      sys.executable,
      "-m",
      "ctl.launch",
      "--num_workers=1",
      "--max_restarts=1000000",
      "--restart_backoff_secs=0",
      "--",
      "false",
    ],
    cwd=REPO_ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  time.sleep(3)
  launcher.send_signal(signal.SIGTERM)
  _, stderr = launcher.communicate(timeout=DEADLINE_SECS)
  assert launcher.returncode == 128 + signal.SIGTERM, stderr[-3000:]
  assert "Traceback" not in stderr
  restarts = stderr.count("[launcher] restart ")
  assert 1 <= restarts <= 3 / supervisor.MIN_PAUSE_SECS + 1, stderr[-3000:]


def _launcher_tree(launcher_pid):
  """The launcher's descendants, and the heartbeat directories they use."""
  tree, heartbeats = (
    psutil.Process(launcher_pid).children(recursive=True),
    set(),
  )
  for process in tree:
    try:
      beats = process.environ().get(env.HEARTBEAT_DIR)
    except psutil.Error:
      continue
    if beats:  # The launcher's directory holds one per start.
      heartbeats.add(os.path.dirname(beats))
  return tree, heartbeats


def test_sigkill_to_the_launcher_takes_every_worker_with_it(tmp_path):
  model_dir = tmp_path / "run"
  events = f"{model_dir}.events.jsonl"
  launcher = start(
    [
      sys.executable,
      "-m",
      "ctl.launch",
      "--num_workers=2",
      "--",
      *trainer_command(
        *FAST_FLAGS, "--train_steps=100000", f"--model_dir={model_dir}"
      ),
    ],
    events=events,
  )
  for worker in (0, 1):
    events_lib.wait_for_step(events, 10, process=launcher, worker=worker)
  tree, heartbeats = _launcher_tree(launcher.pid)
  assert len(heartbeats) == 1 and all(map(os.path.isdir, heartbeats))
  launcher.kill()
  finish(launcher)
  try:
    _assert_all_gone([p.pid for p in tree], timeout=5)
  finally:
    for process in tree:  # Not left training when the test fails.
      try:
        os.killpg(process.pid, signal.SIGKILL)
      except OSError:
        pass
  assert not any(map(os.path.exists, heartbeats))
