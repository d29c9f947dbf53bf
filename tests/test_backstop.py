"""ctl.resilience.backstop alone, in real processes (its use by the stall watchdog, a
call that holds the GIL, is in test_watchdog.py)."""

import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

_ARMED = """
import sys, time
from ctl.resilience import backstop
stop = backstop.Backstop()
stop.arm(float(sys.argv[1]))
print("armed", flush=True)
time.sleep(float(sys.argv[2]))
stop.close()
print("survived", flush=True)
"""


def _start(armed_secs: float, runs_secs: float) -> subprocess.Popen:
  process = subprocess.Popen(
    [sys.executable, "-c", _ARMED, str(armed_secs), str(runs_secs)],
    cwd=REPO,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  assert process.stdout.readline() == "armed\n"
  return process


def test_silence_past_the_armed_time_dumps_the_stacks_and_kills():
  process = _start(armed_secs=1, runs_secs=600)
  out, err = process.communicate(timeout=120)
  assert process.returncode == -signal.SIGKILL
  assert "stall: the stall watchdog of process" in err
  assert "in <module>" in err  # faulthandler's stacks, before the kill.
  assert "survived" not in out


def test_time_stopped_is_not_counted():
  # Armed for 2 s of running; stopped (as by Ctrl-Z) for 6 s in between.
  process = _start(armed_secs=2, runs_secs=1)
  process.send_signal(signal.SIGSTOP)
  time.sleep(6)
  process.send_signal(signal.SIGCONT)
  out, err = process.communicate(timeout=120)
  assert process.returncode == 0, err
  assert out == "survived\n"
