"""ctl.processes: whether a pid runs, and which process a record names,
across pid reuse, pid namespaces and reboots."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ctl import processes
from tests.conftest import earlier_identity


def _ended_process() -> tuple[int, str]:
  """The pid and identity of a process that has ended (reaped)."""
  child = subprocess.Popen(
    [sys.executable, "-c", "import sys; sys.stdin.read()"],
    stdin=subprocess.PIPE,
  )
  recorded = processes.identity(child.pid)
  child.communicate()
  return child.pid, recorded


@pytest.mark.parametrize("pid", [0, -1, 2**64, "1", None, 1.0, True])
def test_no_pid_but_a_positive_whole_number_is_alive(pid):
  """os.kill(0, 0) and os.kill(-1, 0) signal process groups, so pid 0 or -1
  in a lease record read as a live holder (issue 57); 2**64 overflowed."""
  assert not processes.pid_alive(pid)


@pytest.mark.processes
def test_a_live_process_is_alive_and_an_ended_one_is_not():
  assert processes.pid_alive(os.getpid()) and processes.pid_alive(os.getppid())
  assert not processes.pid_alive(_ended_process()[0])
  zombie = subprocess.Popen([sys.executable, "-c", ""])
  os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # Not reaped.
  try:
    assert not processes.pid_alive(zombie.pid)  # Ended, though not reaped.
  finally:
    zombie.wait()


@pytest.mark.processes
def test_an_ended_process_has_ended_for_certain_a_live_one_never():
  pid, recorded = _ended_process()
  assert recorded and processes.ended(pid, recorded)
  for live in (os.getpid(), os.getppid()):
    assert not processes.ended(live, processes.identity(live))


def test_a_pid_reused_by_another_process_is_the_first_ones_end():
  """The kernel hands an ended process's pid to a new one: the record's
  start time then names another process, and its own has ended."""
  assert processes.ended(os.getpid(), earlier_identity(os.getpid()))


# Past any pid the kernel hands out (pid_max is at most 2**22).
_NO_PID = 2**22 + 1


@pytest.mark.parametrize(
  "recorded, comparable",
  [
    ("another-boot/{pids}/{clocks}/12345", False),
    ("{boot}/pid:[1]/{clocks}/12345", False),
    ("{boot}/{pids}/time:[1]/12345", False),
    ("", True),
  ],
  ids=[
    "another boot",
    "another pid namespace",
    "another time namespace",
    "unknown",
  ],
)
def test_a_process_of_another_boot_or_namespace_is_never_judged_by_pid(
  recorded, comparable
):
  """A pid means nothing across a reboot, a container's pid namespace or a
  host of the same name, and a start time nothing across time namespaces
  (/proc shifts it by the reader's): there no pid that is gone proves an
  end; a record of no identity (an earlier version's) is judged by its pid
  as before."""
  where = processes.identity(os.getpid()).rpartition("/")[0]
  boot, pids, clocks = where.split("/")
  recorded = recorded.format(boot=boot, pids=pids, clocks=clocks)
  assert not processes.ended(_NO_PID, recorded)
  assert processes.comparable(recorded) == comparable
  assert processes.ended(_NO_PID, f"{where}/12345")  # The same: gone.


def test_a_live_process_whose_start_cannot_be_read_may_run(monkeypatch):
  """/proc mounted with hidepid shows another user's process to `kill`
  but not its stat: what cannot be read proves no end."""
  recorded = earlier_identity(os.getppid())
  monkeypatch.setattr(processes, "_start_time", lambda pid: "")
  assert not processes.ended(os.getppid(), recorded)


def test_this_process_age_is_the_time_since_its_start():
  """`age` reads the start time from /proc, as the kernel keeps it: the
  same as psutil's start time of this process, to its ticks' resolution."""
  since_start = time.time() - psutil.Process().create_time()
  assert abs(processes.age() - since_start) < 1.0


@pytest.mark.processes
def test_a_stopped_process_is_in_state_t_and_a_gone_one_in_none():
  child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(60)"]
  )
  try:
    child.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while processes.state(child.pid) != "T" and time.monotonic() < deadline:
      time.sleep(0.05)
    assert processes.state(child.pid) == "T"
    assert processes.pid_alive(child.pid)  # Stopped still runs.
  finally:
    child.kill()
    child.wait()
  assert processes.state(child.pid) == ""
