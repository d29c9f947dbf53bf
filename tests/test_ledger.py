"""ctl.telemetry.ledger: the run record, one file per attempt, written from the marks."""

import json
import logging
import os

import pytest

from ctl.telemetry import goodput
from ctl.telemetry import ledger
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


def _run_attempt(directory, *, loops=3, error=None):
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
  _run_attempt(directory, loops=3)
  [events] = ledger.read(directory)
  kinds = [e["event"] for e in events]
  assert kinds[0] == "start" and kinds[-1] == "end"
  [loops] = [e for e in events if e.get("phase") == "train_loop"]
  assert (loops["step0"], loops["step"], loops["loops"]) == (0, 30, 3)
  assert events[-1]["outcome"] == "done" and events[-1]["step"] == 30


def test_a_line_cut_short_is_skipped(tmp_path):
  directory = str(tmp_path / "ledger")
  _run_attempt(directory)
  [name] = os.listdir(directory)
  with open(os.path.join(directory, name), "a") as f:
    f.write('{"event": "phase", "pha')  # A crash in the middle of a write.
  [events] = ledger.read(directory)
  assert events[-1]["event"] == "end"
  assert all(json.dumps(e) for e in events)


def test_a_start_up_that_ends_in_a_user_error_writes_nothing(tmp_path):
  directory = str(tmp_path / "ledger")
  record = ledger.Ledger(directory=directory, environ={})
  record(_mark("run", 0, at=1.0))
  record(_mark("startup", 0, at=2.0, seconds=1.0, error="UserError"))
  record(_mark("run", 0, at=2.0, seconds=1.0, error="UserError"))
  assert not os.path.exists(directory)
  assert ledger.read(directory) == []


def test_the_jobset_restart_attempt_is_recorded_with_the_start(tmp_path):
  directory = str(tmp_path / "ledger")
  for environ in ({}, {"CTL_JOBSET_RESTART_ATTEMPT": "2"}):
    record = ledger.Ledger(directory=directory, environ=environ)
    record(_mark("run", 0, at=1.0))
    record(_mark("startup", 0, at=2.0, seconds=1.0))
    record(_mark("run", 0, at=3.0, seconds=2.0))
  # Both attempts are this process: each has its own record.
  starts = [
    e for a in ledger.read(directory) for e in a if e["event"] == "start"
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
  accounting = goodput.account(ledger.read(directory))
  assert [a.restored_step for a in accounting.attempts] == [0, 10, 20, 30, 40]
  assert accounting.final_step == 50 and accounting.lost_steps == 0
  assert [a.outcome for a in accounting.attempts] == ["done"] * 5


# Well-formed JSON, wrong for the ledger: each crashed the goodput accounting
# (and with it ctl-report and every later trainer run) before it was skipped.
_WRONG_LINES = [
  '{"event": "phase", "phase": "train_loop", "t0": "soon", "t1": 108.5, '
  '"step0": 30, "step": 40, "ok": true, "loops": 1, "busy": 1.0}',
  '{"event": "phase", "phase": "checkpoint_save", "t0": 108.0, "t1": 108.5, '
  '"step0": 30, "step": "30", "ok": true}',
  '{"event": "phase", "phase": "train_loop", "t0": 108.0, "t1": 108.5}',
  '{"event": "end", "time": null, "step": 30, "outcome": "done"}',
  '{"event": "stall", "time": [1], "phase": "train_loop", "step": 30}',
  '{"event": "phase", "phase": 7, "t0": 108.0, "t1": NaN, "step0": 30, '
  '"step": 30, "ok": true}',
]


@pytest.mark.parametrize(
  "line", _WRONG_LINES, ids=[str(i) for i in range(len(_WRONG_LINES))]
)
def test_a_line_with_wrong_field_types_is_skipped_with_a_warning(
  tmp_path, caplog, line
):
  directory = str(tmp_path / "ledger")
  _run_attempt(directory)
  [name] = os.listdir(directory)
  path = os.path.join(directory, name)
  with open(path) as f:
    lines = f.read().splitlines()
  lines.insert(2, line)
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  with caplog.at_level(logging.WARNING):
    [events] = ledger.read(directory)
  assert len(events) == len(lines) - 1 and events[-1]["event"] == "end"
  assert goodput.account([events]).final_step == 30
  [warning] = [r.getMessage() for r in caplog.records]
  assert warning.startswith(f"Skipped line 3 of {path}: ")


def test_an_attempt_whose_start_line_is_wrong_is_skipped(tmp_path, caplog):
  directory = str(tmp_path / "ledger")
  _run_attempt(directory)
  _run_attempt(directory)
  first = os.path.join(directory, sorted(os.listdir(directory))[0])
  with open(first) as f:
    lines = f.read().splitlines()
  start = json.loads(lines[0])
  lines[0] = json.dumps({**start, "time": str(start["time"])})
  with open(first, "w") as f:
    f.write("\n".join(lines) + "\n")
  with caplog.at_level(logging.WARNING):
    attempts = ledger.read(directory)
  assert len(attempts) == 1
  assert any(
    r.getMessage().startswith(f"Skipped line 1 of {first}: ")
    for r in caplog.records
  )


def test_a_stall_in_the_train_loop_is_read_back(tmp_path, caplog):
  # A stall names the phase it happened in; only phase events carry 'busy'.
  directory = str(tmp_path / "ledger")
  record = _run_attempt(directory)
  record.record(
    "stall",
    worker=0,
    phase="train_loop",
    step=15,
    seconds=21.0,
    limit=20.0,
    flag="--stall_timeout_secs",
  )
  with caplog.at_level(logging.WARNING):
    [events] = ledger.read(directory)
  [stall] = [e for e in events if e["event"] == "stall"]
  assert (stall["phase"], stall["step"], stall["worker"]) == (
    "train_loop",
    15,
    0,
  )
  assert not caplog.records


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
