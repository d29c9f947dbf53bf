"""ctl.telemetry.ledger_reader: every attempt's events read back, a damaged or
wrong line skipped (with a warning naming it) instead of failing a reader."""

import json
import logging
import os

import pytest

from ctl.telemetry import goodput
from ctl.telemetry import ledger_reader
from tests.test_ledger import run_attempt


def test_a_line_cut_short_is_skipped(tmp_path):
  directory = str(tmp_path / "ledger")
  run_attempt(directory)
  [name] = os.listdir(directory)
  with open(os.path.join(directory, name), "a") as f:
    f.write('{"event": "phase", "pha')  # A crash in the middle of a write.
  [events] = ledger_reader.read(directory)
  assert events[-1]["event"] == "end"
  assert all(json.dumps(e) for e in events)


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
  run_attempt(directory)
  [name] = os.listdir(directory)
  path = os.path.join(directory, name)
  with open(path) as f:
    lines = f.read().splitlines()
  lines.insert(2, line)
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  with caplog.at_level(logging.WARNING):
    [events] = ledger_reader.read(directory)
  assert len(events) == len(lines) - 1 and events[-1]["event"] == "end"
  assert goodput.account([events]).final_step == 30
  [warning] = [r.getMessage() for r in caplog.records]
  assert warning.startswith(f"Skipped line 3 of {path}: ")


def test_an_attempt_whose_start_line_is_wrong_is_skipped(tmp_path, caplog):
  directory = str(tmp_path / "ledger")
  run_attempt(directory)
  run_attempt(directory)
  first = os.path.join(directory, sorted(os.listdir(directory))[0])
  with open(first) as f:
    lines = f.read().splitlines()
  start = json.loads(lines[0])
  lines[0] = json.dumps({**start, "time": str(start["time"])})
  with open(first, "w") as f:
    f.write("\n".join(lines) + "\n")
  with caplog.at_level(logging.WARNING):
    attempts = ledger_reader.read(directory)
  assert len(attempts) == 1
  assert any(
    r.getMessage().startswith(f"Skipped line 1 of {first}: ")
    for r in caplog.records
  )


def test_a_stall_in_the_train_loop_is_read_back(tmp_path, caplog):
  # A stall names the phase it happened in; only phase events carry 'busy'.
  directory = str(tmp_path / "ledger")
  record = run_attempt(directory)
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
    [events] = ledger_reader.read(directory)
  [stall] = [e for e in events if e["event"] == "stall"]
  assert (stall["phase"], stall["step"], stall["worker"]) == (
    "train_loop",
    15,
    0,
  )
  assert not caplog.records
