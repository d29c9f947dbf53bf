"""ctl.launch.spare: a process that imports ahead, waits, then runs the worker."""

import json
import os
import subprocess
import sys

import psutil
import pytest

from ctl.launch import spare
from tests.conftest import nice_once
from trainer.testing import REPO

_PROBE = '''
"""A stand-in worker module: what it was run with, as one JSON line."""
import json
import os
import sys


def autogroup_nice():
  """This process's session's nice; None where it has no autogroup of its
  own (no file, or an empty one: a session the kernel started before
  autogroups, as CI's processes are, all in init's session)."""
  try:
    with open("/proc/self/autogroup") as f:
      fields = f.read().split()
  except OSError:
    return None
  return fields[-1] if fields else None


def main():
  import csv  # Deferred, as the trainer defers TensorFlow.
  from . import sibling  # Relative: not the spare's to import.
  del csv, sibling


if __name__ == "__main__":
  print(json.dumps({
    "argv": sys.argv,
    "x": os.environ.get("X"),
    "inherited": os.environ.get("NOT_HANDED_OVER"),
    "attempt_start": os.environ.get("CTL_ATTEMPT_START"),
    "csv_already_imported": "csv" in sys.modules,
    "niceness": os.getpriority(os.PRIO_PROCESS, 0),
    "autogroup": autogroup_nice(),
  }))
'''


def _spare(tmp_path, *, session=False) -> subprocess.Popen:
  (tmp_path / "probe_worker.py").write_text(_PROBE)
  env = {
    **os.environ,
    "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}",
    "NOT_HANDED_OVER": "from the agent's own start",
  }
  return subprocess.Popen(
    [sys.executable, "-m", "ctl.launch.spare", "probe_worker", "--a", "b"],
    env=env,
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    start_new_session=session,  # As the agent starts it (workers.spawn).
  )


def test_imports_of_lists_top_level_and_deferred_absolute_imports(
  tmp_path, monkeypatch
):
  (tmp_path / "probe_worker.py").write_text(_PROBE)
  monkeypatch.syspath_prepend(str(tmp_path))
  assert spare.imports_of("probe_worker") == ["json", "os", "sys", "csv"]
  assert spare.imports_of("no_such_module_here") == []


def test_imports_of_the_trainer_reaches_tensorflow_through_its_package():
  """The trainer imports its own modules relatively (e25592e); the one
  that loads TensorFlow must still be the spare's to import (issue 37: a
  restart into the spare paid the whole TensorFlow import again)."""
  names = spare.imports_of("trainer.task")
  assert "trainer.job" in names and "trainer.flags" in names


@pytest.mark.processes
def test_the_hand_over_runs_the_module_with_the_given_environment(tmp_path):
  process = _spare(tmp_path)
  try:
    assert process.stderr.readline().strip() == spare.READY_LINE
    handed = {"X": "1", "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    out, err = process.communicate(json.dumps(handed) + "\n", timeout=60)
  finally:
    process.kill()
  assert process.returncode == 0, err
  ran = json.loads(out)
  assert ran["argv"][1:] == ["--a", "b"]
  assert ran["x"] == "1"
  assert ran["inherited"] is None  # Only the handed-over environment.
  assert float(ran["attempt_start"]) > 0
  assert ran["csv_already_imported"]  # Warmed up before the hand-over.


@pytest.mark.processes
def test_an_agent_that_ends_without_a_restart_ends_the_spare_quietly(
  tmp_path,
):
  process = _spare(tmp_path)
  try:
    assert process.stderr.readline().strip() == spare.READY_LINE
    out, err = process.communicate("", timeout=60)
  finally:
    process.kill()
  assert (process.returncode, out, err) == (0, "", "")


@pytest.mark.processes
def test_the_spare_imports_at_a_lower_priority_the_worker_runs_at_its_own(
  tmp_path,
):
  """A restart on the node's cores comes before the next spare's imports;
  the worker it becomes runs at the priority the agent gave it (where the
  process may raise it back: root or CAP_SYS_NICE; else it never lowers)."""
  started = os.getpriority(os.PRIO_PROCESS, 0)
  process = _spare(tmp_path)
  try:
    assert process.stderr.readline().strip() == spare.READY_LINE
    waiting = psutil.Process(process.pid).nice()
    handed = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    out, err = process.communicate(json.dumps(handed) + "\n", timeout=60)
  finally:
    process.kill()
  assert process.returncode == 0, err
  lowered = min(19, started + spare.WARM_UP_NICENESS)
  assert waiting == (lowered if spare.may_restore_priority() else started)
  assert json.loads(out)["niceness"] == started


def _autogroups() -> bool:
  try:
    with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
      return f.read().strip() == "1"
  except OSError:
    return False


@pytest.mark.skipif(
  not _autogroups() or not spare.may_restore_priority(),
  reason="the kernel does not group scheduling by session, or the spare "
  "may not lower itself",
)
@pytest.mark.processes
def test_in_its_own_session_the_spare_lowers_its_sessions_priority_too(
  tmp_path,
):
  """Where the kernel schedules by session (autogroup), a thread's nice
  ranks it only within its session: the spare, in a session of its own as
  the agent starts it, would take a core from the worker in another session
  as an equal. So the session's own nice is lowered too, and set back at
  the hand-over (issue 37: a spare's imports slowed the restart)."""
  process = _spare(tmp_path, session=True)
  try:
    assert process.stderr.readline().strip() == spare.READY_LINE
    with open(f"/proc/{process.pid}/autogroup") as f:
      waiting = f.read().split()[-1]
    handed = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    out, err = process.communicate(json.dumps(handed) + "\n", timeout=60)
  finally:
    process.kill()
  assert process.returncode == 0, err
  assert waiting == str(spare.WARM_UP_NICENESS)
  assert json.loads(out)["autogroup"] == "0"


@pytest.mark.skipif(
  not spare.may_restore_priority(), reason="the spare may not lower itself"
)
@pytest.mark.processes
def test_a_hand_over_before_the_spare_is_warm_runs_at_the_workers_priority(
  tmp_path,
):
  """A failure soon after a start hands the restart to a spare still
  importing at its lowered priority: its priority is set back at once."""
  started = os.getpriority(os.PRIO_PROCESS, 0)
  process = _spare(tmp_path, session=True)
  handed = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
  try:  # At once: before its READY_LINE.
    out, err = process.communicate(json.dumps(handed) + "\n", timeout=60)
  finally:
    process.kill()
  assert process.returncode == 0, err
  ran = json.loads(out)
  assert ran["niceness"] == started
  assert ran["autogroup"] in ("0", None)


@pytest.mark.skipif(
  not spare.may_restore_priority(), reason="the spare may not lower itself"
)
@pytest.mark.processes
def test_told_the_start_beside_it_trains_steadily_the_spare_waits_at_full_priority(
  tmp_path,
):
  """Lowered, a spare on busy cores never got warm while its worker trained
  (the tiers bench's run ended first); once the agent sees the start past
  its critical path it says so, and the spare goes on at full priority."""
  started = os.getpriority(os.PRIO_PROCESS, 0)
  process = _spare(tmp_path, session=True)
  try:
    process.stdin.write(spare.FULL_PRIORITY_LINE + "\n")
    process.stdin.flush()
    assert process.stderr.readline().strip() == spare.READY_LINE
    waiting = nice_once(process.pid, started)
    handed = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    out, err = process.communicate(json.dumps(handed) + "\n", timeout=60)
  finally:
    process.kill()
  assert process.returncode == 0, err
  assert waiting == started
  assert json.loads(out)["niceness"] == started
