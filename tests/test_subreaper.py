"""A section's own processes count as its own, wherever they end up.

A section's workers run in their own sessions (ctl.launch), and the restart
sections SIGKILL their agents: the workers are then orphans, reparented to
init, and their CPU was counted as "other processes", so the restart section
was marked BUSY however quiet the machine (its verdicts all UNDECIDED). Real
processes here: a section that leaves an orphan burning CPU in a session of
its own, and one that leaves a process running after it ended.
"""

import os
import re
import resource
import sys
import textwrap

import pytest

from benchmarks import run_all

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

# Burns `seconds` of CPU, then writes the CPU it used to `path`.
_BURN = textwrap.dedent(
  """
  import os, sys, time
  path, seconds = sys.argv[1], float(sys.argv[2])
  while time.process_time() < seconds:
    pass
  with open(path + ".tmp", "w") as f:
    f.write(str(time.process_time()))
  os.replace(path + ".tmp", path)
  if len(sys.argv) > 3:
    time.sleep(float(sys.argv[3]))
  """
)
# Starts _BURN in a session of its own and exits at once: an orphan.
_SECTION = textwrap.dedent(
  """
  import subprocess, sys
  subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]],
                   start_new_session=True)
  """
)


def _children_cpu() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def test_an_orphan_in_its_own_session_is_the_sections_cpu(tmp_path):
  path = str(tmp_path / "burned")
  before = _children_cpu()
  code, _ = run_all._run_process(
    [sys.executable, "-c", _SECTION, _BURN, path, "1.0"],
    str(tmp_path / "section.log"),
    timeout_secs=120,
  )
  assert code == 0
  with open(path) as f:
    burned = float(f.read())
  assert _children_cpu() - before >= burned >= 1.0


def test_what_a_section_leaves_running_is_stopped_and_named(tmp_path):
  path, log = str(tmp_path / "burned"), str(tmp_path / "section.log")
  code, _ = run_all._run_process(
    [sys.executable, "-c", _SECTION, _BURN, path, "0.1", "3600"],
    log,
    timeout_secs=120,
  )
  assert code == 0
  assert os.path.exists(path)
  with open(log) as f:
    text = f.read()
  assert "still running when the section ended, stopped" in text, text
  (pid,) = map(int, re.findall(r"pid (\d+) \(python", text))
  assert not os.path.exists(f"/proc/{pid}")


# Starts a process in a session of its own that exits at once, then waits
# until it is gone from /proc: exit 0, or 1 while it stays a zombie.
_REAPED_AT_ONCE = textwrap.dedent(
  """
  import os, subprocess, sys, time
  pid = int(subprocess.check_output([sys.executable, "-c",
    "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
    "'pass'], start_new_session=True).pid)"]))
  deadline = time.monotonic() + 30
  while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
    time.sleep(0.05)
  sys.exit(int(os.path.exists(f"/proc/{pid}")))
  """
)


def test_an_orphan_that_ends_during_the_section_is_reaped_at_once(tmp_path):
  """A dead orphan left a zombie until the section ended looks alive to
  whatever the section checks (a tier's owners, a wait for its processes)."""
  code, _ = run_all._run_process(
    [sys.executable, "-c", _REAPED_AT_ONCE],
    str(tmp_path / "section.log"),
    timeout_secs=120,
  )
  assert code == 0
