"""ctl-report's restart phases, on the ledger of a real killed and restarted run.

One job runs under `ctl.launch --max_restarts=2`; the test SIGKILLs its
trainer once it has trained past its first checkpoint, then its restart in
the middle of its first loop (held there by an injected stall), and reads,
from `ctl-report`, where each start's way to its first step went (issue 37).
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from ctl.telemetry import goodput
from ctl.telemetry import ledger_reader
from ctl.telemetry import restart_phases
from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import trainer_env
from tests.conftest import wait_for_attempt
from trainer.testing import launch_command

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

KILL_AT = 30


@pytest.fixture(scope="module")
def killed_twice(tmp_path_factory):
  """The model_dir of a job killed at KILL_AT, its restart killed in its
  first loop, and the second restart run to the end by the launcher."""
  model_dir = str(tmp_path_factory.mktemp("restart") / "run")
  launcher = subprocess.Popen(
    launch_command(
      "--num_workers=1",
      "--max_restarts=2",
      "--restart_backoff_secs=0.5",
      trainer_flags=(
        *FAST_FLAGS,
        "--train_steps=60",
        "--eval_every_steps=0",
        f"--model_dir={model_dir}",
      ),
    ),
    cwd=REPO,
    env=trainer_env(faults="stall@1:first_loop:attempt=1"),
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )
  events = wait_for_attempt(model_dir, 0, KILL_AT, launcher)
  os.kill(events[0]["pid"], signal.SIGKILL)
  events = wait_for_attempt(model_dir, 1, 1, launcher)
  while not any(e["event"] == "fault" for e in events):  # In its first loop.
    time.sleep(0.05)
    events = wait_for_attempt(model_dir, 1, 1, launcher)
  time.sleep(1)  # The stall holds it there: a second of first loop is lost.
  os.kill(events[0]["pid"], signal.SIGKILL)
  output, _ = launcher.communicate(timeout=300)
  assert launcher.returncode == 0, output[-3000:]
  return model_dir


def test_each_starts_way_to_its_first_step_adds_up(killed_twice):
  accounting = goodput.account(
    ledger_reader.read(ledger_reader.ledger_dir(killed_twice))
  )
  first, cut, restart = restart_phases.restart_phases(accounting)
  assert first["gap"] == 0
  # The restart came back from a process that did not exist: every phase
  # of a cold start is there, and the gap holds the launcher's back-off.
  for phase in restart_phases.RESTART_PHASES:
    assert restart[phase] > 0 or phase in ("before_loop", goodput.LOST), phase
  assert restart["gap"] > 0
  assert restart[goodput.RESTORE] == pytest.approx(
    accounting.seconds[goodput.RESTORE]
    - sum(
      s.end - s.start
      for s in accounting.segments
      if s.attempt in (0, 1) and s.category == goodput.RESTORE
    ),
  )
  # The phases are the accounting's, start by start: all of a start's
  # start-up, restore and tracing, and the gap before it.
  for category, phases in (
    (goodput.RESTART_GAP, ("gap",)),
    (goodput.STARTUP, ("imports", "build")),
    (goodput.TRACING, (goodput.TRACING,)),
  ):
    assert sum(
      restart_phases.restart_phases(accounting)[i][p]
      for i in (0, 1, 2)
      for p in phases
    ) == pytest.approx(accounting.seconds[category])


def test_a_first_loop_a_failure_cut_short_is_lost_not_bookkeeping(killed_twice):
  accounting = goodput.account(
    ledger_reader.read(ledger_reader.ledger_dir(killed_twice))
  )
  _, cut, restart = restart_phases.restart_phases(accounting)
  # The second start was killed a second into its first loop: that loop
  # (its trace, held by the stall) is work the failure cut short, not
  # bookkeeping before the loop, and it never finished a trace.
  assert cut[goodput.LOST] >= 1
  assert cut[goodput.TRACING] == 0
  assert cut["before_loop"] < cut[goodput.LOST]
  assert restart[goodput.LOST] == 0


def test_ctl_report_prints_each_starts_restart_phases(killed_twice):
  result = subprocess.run(
    [sys.executable, "-m", "ctl.report", killed_twice, "--png="],
    cwd=REPO,
    env=trainer_env(),
    capture_output=True,
    text=True,
    check=True,
  )
  out = result.stdout
  head = "Seconds from the failure before each start to its first step:"
  assert head in out
  table = out.split(head)[1].strip().splitlines()
  assert table[0].split() == [
    "start",
    "gap",
    "imports",
    "build",
    "restore",
    "pre-loop",
    "tracing",
    "lost",
    "total",
  ]
  rows = [line.split() for line in table[1:4]]
  assert [row[0] for row in rows] == ["1", "2", "3"]
  for row in rows:
    numbers = [float(x) for x in row[1:]]
    assert sum(numbers[:-1]) == pytest.approx(numbers[-1], abs=0.03)
  assert float(rows[1][1]) > 0  # The restart's gap.
