"""ctl.telemetry.ledger: the run record, one file per attempt, written from the marks."""

import os

from ctl.telemetry import goodput
from ctl.telemetry import ledger
from ctl.telemetry import ledger_reader
from ctl.telemetry import progress


def _mark(phase, step, *, at, seconds=None, steps=0, error=None):
  return progress.Mark(
    phase=phase,
    step=step,
    time=at,
    seconds=seconds,
    steps=steps,
    ok=error is None,
    error=error,
  )


def run_attempt(directory, *, loops=3, error=None):
  record = ledger.Ledger(directory=directory, environ={})
  record(_mark("run", 0, at=100.0))
  record(_mark("startup", 0, at=104.0, seconds=4.0))
  for i in range(loops):
    record(
      _mark("train_loop", 10 * (i + 1), at=105.0 + i, seconds=1.0, steps=10)
    )
  record(_mark("run", 10 * loops, at=109.0, seconds=9.0, error=error))
  return record


def test_consecutive_loops_become_one_event_and_the_end_is_recorded(tmp_path):
  directory = str(tmp_path / "ledger")
  run_attempt(directory, loops=3)
  [events] = ledger_reader.read(directory)
  kinds = [e["event"] for e in events]
  assert kinds[0] == "start" and kinds[-1] == "end"
  [loops] = [e for e in events if e.get("phase") == "train_loop"]
  assert (loops["step0"], loops["step"], loops["loops"]) == (0, 30, 3)
  assert events[-1]["outcome"] == "done" and events[-1]["step"] == 30


def test_a_start_up_that_ends_in_a_user_error_writes_nothing(tmp_path):
  directory = str(tmp_path / "ledger")
  record = ledger.Ledger(directory=directory, environ={})
  record(_mark("run", 0, at=1.0))
  record(_mark("startup", 0, at=2.0, seconds=1.0, error="UserError"))
  record(_mark("run", 0, at=2.0, seconds=1.0, error="UserError"))
  assert not os.path.exists(directory)
  assert ledger_reader.read(directory) == []


def test_the_jobset_restart_attempt_is_recorded_with_the_start(tmp_path):
  directory = str(tmp_path / "ledger")
  for environ in ({}, {"CTL_JOBSET_RESTART_ATTEMPT": "2"}):
    record = ledger.Ledger(directory=directory, environ=environ)
    record(_mark("run", 0, at=1.0))
    record(_mark("startup", 0, at=2.0, seconds=1.0))
    record(_mark("run", 0, at=3.0, seconds=2.0))
  # Both attempts are this process: each has its own record.
  starts = [
    e for a in ledger_reader.read(directory) for e in a if e["event"] == "start"
  ]
  assert ["jobset_restart" in e for e in starts].count(True) == 1
  assert [e["jobset_restart"] for e in starts if "jobset_restart" in e] == [2]


def test_every_attempt_of_one_process_gets_its_own_record(tmp_path):
  # A notebook trains to 10, then to 20, ... on one directory: the records
  # had one name (from the process's start time) and overwrote each other.
  directory = str(tmp_path / "ledger")
  for restored in range(0, 50, 10):
    record = ledger.Ledger(directory=directory, environ={})
    record(_mark("run", restored, at=1.0))
    record(_mark("startup", restored, at=2.0, seconds=1.0))
    record(_mark("train_loop", restored + 10, at=3.0, seconds=1.0, steps=10))
    record(_mark("run", restored + 10, at=3.0, seconds=2.0))
  accounting = goodput.account(ledger_reader.read(directory))
  assert [a.restored_step for a in accounting.attempts] == [0, 10, 20, 30, 40]
  assert accounting.final_step == 50 and accounting.lost_steps == 0
  assert [a.outcome for a in accounting.attempts] == ["done"] * 5


def test_an_unkept_ledger_answers_every_call_a_kept_one_does():
  """A worker that keeps no ledger holds an `Unkept` one instead of None, so
  every method callers use on the chief's must exist on it too."""
  public = {
    name
    for name in dir(ledger.Ledger)
    if not name.startswith("_") or name == "__call__"
  }
  missing = {name for name in public if not hasattr(ledger.Unkept, name)}
  assert not missing
  assert ledger.Unkept().accounting() is None
  assert (ledger.Ledger.kept, ledger.Unkept.kept) == (True, False)
