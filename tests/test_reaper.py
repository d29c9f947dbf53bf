"""ctl.launch.reaper alone: real processes, no TensorFlow (the launcher's use of it
is in test_launch.py and test_agent.py).

A stand-in launcher starts a sleeper in a process group of its own, as
ctl.launch.workers starts a worker, and is then SIGKILLed or exits cleanly.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

_LAUNCHER = """
import os, subprocess, sys, time
from ctl.launch import reaper
mode, directory = sys.argv[1], sys.argv[2]
if mode == "pdeathsig":  # The kernel's parent-death signal only.
  sleeper = subprocess.Popen(["sleep", "600"], preexec_fn=reaper.die_with_parent())
  print(sleeper.pid, flush=True)
  time.sleep(600)
with reaper.Reaper() as orders:
  sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
  orders.watch_group(sleeper.pid)
  orders.remove_dir(directory)
  print(sleeper.pid, flush=True)
  if mode == "clean":
    sys.exit(0)  # Leaves the with block: `done`, the sleeper is kept.
  time.sleep(600)
"""


def _start(mode: str, directory: str) -> tuple[subprocess.Popen, int]:
  launcher = subprocess.Popen(
    [sys.executable, "-c", _LAUNCHER, mode, directory],
    cwd=REPO,
    stdout=subprocess.PIPE,
    text=True,
  )
  return launcher, int(launcher.stdout.readline())


def _alive(pid: int) -> bool:
  """True while `pid` runs (a zombie reparented to init counts as gone)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def _gone_within(pid: int, secs: float) -> bool:
  deadline = time.monotonic() + secs
  while _alive(pid) and time.monotonic() < deadline:
    time.sleep(0.05)
  return not _alive(pid)


def test_a_killed_launcher_takes_its_groups_and_directories_with_it(tmp_path):
  directory = tmp_path / "heartbeats"
  directory.mkdir()
  launcher, sleeper = _start("kill", str(directory))
  launcher.kill()
  launcher.wait()
  assert _gone_within(sleeper, 5)
  deadline = time.monotonic() + 5
  while directory.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
  assert not directory.exists()


def test_a_clean_exit_kills_nothing_and_removes_nothing(tmp_path):
  directory = tmp_path / "heartbeats"
  directory.mkdir()
  launcher, sleeper = _start("clean", str(directory))
  assert launcher.wait(timeout=60) == 0
  try:
    assert _alive(sleeper) and directory.exists()
  finally:
    os.kill(sleeper, signal.SIGKILL)


def test_the_parent_death_signal_alone_ends_a_child(tmp_path):
  launcher, sleeper = _start("pdeathsig", str(tmp_path))
  launcher.kill()
  launcher.wait()
  assert _gone_within(sleeper, 5)
