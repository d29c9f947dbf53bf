"""ctl.report: the goodput table and the timeline PNG from a run ledger.

The ledgers here are written by `ctl.telemetry.ledger.Ledger` from hand-made phase
marks, one process per start (two starts, the first killed), so the steps
are known exactly;
test_goodput.py runs the report on ledgers of real killed jobs.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ctl import report
from ctl.errors import CANNOT_WRITE_EXIT_CODE
from ctl.errors import USER_ERROR_EXIT_CODE
from ctl.telemetry import goodput
from ctl.telemetry import goodput_model
from ctl.telemetry import ledger_reader
from ctl.telemetry import spot_cost
from tests.conftest import REPO
from tests.conftest import trainer_env
from trainer.testing import run_command

# One start of a job, as its own process (a ledger file is one process's):
# restores RESTORED, trains 10 steps, saves, trains 10 more, and ends unless
# it is to be "killed" (then it just exits without an end mark).
_ATTEMPT = """
import sys, time
from ctl.telemetry import ledger, progress
directory, restored, end_ok = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
record = ledger.Ledger(directory=directory)
start = time.time()
def mark(phase, step, at, seconds=None, steps=0):
  record(progress.Mark(phase=phase, step=step, time=start + at,
                       seconds=seconds, steps=steps))
mark("run", restored, 0.0)
mark("startup", restored, 0.2, seconds=0.2)
mark("first_loop", restored + 10, 0.4, seconds=0.2, steps=10)
mark("checkpoint_save", restored + 10, 0.45, seconds=0.05)
mark("train_loop", restored + 20, 0.55, seconds=0.1, steps=10)
if end_ok:
  mark("run", restored + 20, 0.6, seconds=0.6)
"""


def _attempt(directory, *, restored, end_ok, environ=None):
  subprocess.run(
    [
      sys.executable,
      "-c",
      _ATTEMPT,
      directory,
      str(restored),
      "1" if end_ok else "0",
    ],
    cwd=REPO,
    env={**trainer_env(), **(environ or {})},
    check=True,
    timeout=120,
  )


@pytest.fixture
def model_dir(tmp_path):
  directory = ledger_reader.ledger_dir(str(tmp_path / "run"))
  # Killed at step 20, after its checkpoint at 10: 10 steps are redone.
  _attempt(directory, restored=0, end_ok=False)
  _attempt(
    directory,
    restored=10,
    end_ok=True,
    environ={
      "CTL_RESTART_COUNT": "1",
      "CTL_PREVIOUS_EXIT": "-9",
      "CTL_PREVIOUS_EXIT_TIME": f"{time.time():.3f}",
    },
  )
  return str(tmp_path / "run")


@pytest.mark.processes
def test_the_table_and_the_timeline_of_a_job_killed_once(model_dir, capsys):
  report.main([model_dir])
  out = capsys.readouterr().out
  assert "killed by SIGKILL" in out and "done" in out
  png = os.path.join(model_dir, report.PNG_NAME)
  with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  accounting = goodput.account(
    ledger_reader.read(ledger_reader.ledger_dir(model_dir))
  )
  assert accounting.failures == 1 and accounting.lost_steps == 10
  assert [a.outcome for a in accounting.attempts] == [
    "killed by SIGKILL",
    "done",
  ]


def test_a_directory_without_a_ledger_is_one_sentence_and_exit_2(
  tmp_path, capsys
):
  with pytest.raises(SystemExit) as exit_info:
    report.main([str(tmp_path), "--png="])
  assert exit_info.value.code == USER_ERROR_EXIT_CODE
  [line] = capsys.readouterr().err.strip().splitlines()
  assert line.startswith("error: no run ledger in ")


@pytest.mark.processes
def test_the_badput_of_a_known_ledger_by_googles_badput_types(
  model_dir, capsys
):
  accounting = goodput.account(
    ledger_reader.read(ledger_reader.ledger_dir(model_dir))
  )
  seconds = accounting.seconds
  by_type = goodput.badput(seconds)

  assert list(by_type) == [
    "TRAINING_PREP",
    "PROGRAM_STARTUP",
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "WASTED_PROGRESS_FROM_DISRUPTION",
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "CUSTOM_BADPUT_EVENTS",
    "OTHER",
  ]
  # The first start was killed after 10 steps past its checkpoint: that
  # work was redone, and no process ran until the second start.
  assert by_type["WASTED_PROGRESS_FROM_DISRUPTION"] == seconds[goodput.LOST] > 0
  assert (
    by_type["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"]
    == seconds[goodput.RESTART_GAP]
  )
  assert by_type["TRAINING_PREP"] == seconds[goodput.STARTUP] > 0
  assert by_type["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] == pytest.approx(
    seconds[goodput.CHECKPOINT_SAVE] + seconds[goodput.CHECKPOINT_UPLOAD]
  )
  assert sum(by_type.values()) + seconds[goodput.GOODPUT] == pytest.approx(
    accounting.total_seconds
  )

  report.main([model_dir, "--png="])
  out = capsys.readouterr().out
  [row] = [
    line
    for line in out.splitlines()
    if line.startswith("WASTED_PROGRESS_FROM_DISRUPTION ")
  ]
  assert row.split()[1] == f"{seconds[goodput.LOST]:.2f}"
  assert row.endswith(goodput.LOST)


@pytest.mark.processes
def test_a_ledger_line_of_wrong_types_is_skipped_with_a_warning(model_dir):
  # One well-formed line with a string time failed every report until it
  # was removed by hand.
  directory = ledger_reader.ledger_dir(model_dir)
  path = os.path.join(directory, sorted(os.listdir(directory))[-1])
  with open(path, "a") as f:
    f.write(
      '{"event": "phase", "phase": "evaluation", "t0": "noon", "t1": 1,'
      ' "step0": 20, "step": 20, "ok": true}\n'
    )
  with open(path) as f:
    lines = len(f.read().splitlines())
  result = run_command(
    [sys.executable, "-m", "ctl.report", model_dir, "--png="]
  )
  assert "killed by SIGKILL" in result.stdout and "done" in result.stdout
  assert "Traceback" not in result.stderr
  [warning] = result.stderr.strip().splitlines()
  assert warning.endswith(
    f"Skipped line {lines} of {path}: 't0' is \"noon\", not a number."
  )


@pytest.mark.processes
def test_a_reader_that_stops_reading_ends_the_report_quietly(model_dir):
  # `ctl-report DIR | head`: the reader is gone before the report writes
  # (its end of the pipe is closed first, so the write always fails).
  read_end, write_end = os.pipe()
  os.close(read_end)
  try:
    result = subprocess.run(
      [sys.executable, "-m", "ctl.report", model_dir, "--png="],
      cwd=REPO,
      env=trainer_env(),
      stdout=write_end,
      stderr=subprocess.PIPE,
      text=True,
      timeout=120,
    )
  finally:
    os.close(write_end)
  assert result.stderr == ""
  assert result.returncode == 128 + signal.SIGPIPE


_TEN_YEARS = 10 * 365 * 86400


@pytest.mark.processes
def test_a_start_whose_clock_was_years_ahead_is_placed_and_named(model_dir):
  # The first start ran on a clock ten years ahead: the report said
  # "Goodput 0.0% of 315359233.0 s", the wrong final step and the wrong
  # steps trained twice.
  directory = ledger_reader.ledger_dir(model_dir)
  first = min(
    (os.path.join(directory, name) for name in os.listdir(directory)),
    key=lambda path: ledger_reader.parse(open(path).read())[0]["time"],
  )
  with open(first) as f:
    events = ledger_reader.parse(f.read())
  for event in events:
    for field in ("time", "t0", "t1"):
      if field in event:
        event[field] += _TEN_YEARS
  with open(first, "w") as f:
    f.write("".join(json.dumps(event) + "\n" for event in events))
  result = run_command(
    [sys.executable, "-m", "ctl.report", model_dir], check=False
  )
  assert result.returncode == 0, result.stderr[-3000:]
  headline, note = result.stdout.splitlines()[:2]
  assert headline.endswith(
    "2 start(s), 1 failure(s), 10 step(s) trained twice; final step 30."
  ), headline
  # Ten years less the real seconds between the two starts (0.1 s in a CI
  # run, so "315359999.9 s": the note once had to start with "31536").
  ahead = re.fullmatch(
    r"Start 2 began ([\d.]+) s before start 1 ended by the wall clock .*"
    r"counted as if it followed at once\.",
    note,
  )
  assert ahead and abs(float(ahead.group(1)) - _TEN_YEARS) < 3600, note
  accounting = goodput.account(ledger_reader.read(directory))
  assert 0 < accounting.total_seconds < 3600
  assert min(accounting.seconds.values()) >= 0


# A ledger of an older ctl (wall times only) whose clock stepped back an hour
# after step 10: the report failed with a ValueError, and with --png= said
# "Goodput 0.0% of 0.0 s" and negative seconds.
_STEPPED_BACK = [
  {"event": "start", "time": 1000.0, "pid": 1, "restart": 0},
  {"event": "run", "time": 1005.0},
  *(
    {"event": "phase", "phase": phase, "t0": t0, "t1": t1, "step0": step0}
    | {"step": step, "ok": True, **extra}
    for phase, t0, t1, step0, step, extra in (
      ("startup", 1005.0, 1006.0, 0, 0, {}),
      ("first_loop", 1006.0, 1008.0, 0, 10, {}),
      ("train_loop", 1008.0, -2590.0, 10, 20, {"loops": 1, "busy": 2.0}),
      ("checkpoint_save", -2590.0, -2589.0, 20, 20, {}),
    )
  ),
  {"event": "end", "time": -2589.0, "step": 20, "outcome": "done"},
]


@pytest.mark.processes
def test_an_older_ledger_whose_clock_stepped_back_is_reported(tmp_path):
  model_dir = str(tmp_path / "run")
  os.makedirs(ledger_reader.ledger_dir(model_dir))
  with open(
    os.path.join(ledger_reader.ledger_dir(model_dir), "a.jsonl"), "w"
  ) as f:
    f.write("".join(json.dumps(event) + "\n" for event in _STEPPED_BACK))
  for png in ("--png=", f"--png={tmp_path}/timeline.png"):
    result = run_command(
      [sys.executable, "-m", "ctl.report", model_dir, png], check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    headline, note = result.stdout.splitlines()[:2]
    assert headline.startswith("Goodput 25.0% of 8.0 s wall time;"), headline
    assert note.endswith("its seconds are a lower bound."), note
    assert " -" not in result.stdout


@pytest.mark.processes
def test_what_spot_is_worth_from_this_runs_own_restart_and_save(
  model_dir, capsys
):
  report.main([model_dir, "--png=", "--spot_price=1", "--on_demand_price=3"])
  out = capsys.readouterr().out
  accounting = goodput.account(
    ledger_reader.read(ledger_reader.ledger_dir(model_dir))
  )
  costs = spot_cost.run_costs(accounting)
  # Two starts: each 0.2 s of start-up and 0.2 - 10 steps of tracing, and
  # the gap between them; the saves, 0.05 s each.
  assert costs.save_seconds == pytest.approx(0.05, abs=0.01)
  assert costs.restart_seconds > 0.2
  rows = {
    (cells[0], float(cells[1])): cells
    for cells in (line.split() for line in out.splitlines())
    if cells and cells[0] in ("Spot", "on-demand")
  }
  assert set(rows) == {
    ("on-demand", 720.0),
    ("Spot", 0.25),
    ("Spot", 1.0),
    ("Spot", 4.0),
    ("Spot", 24.0),
  }
  for (vm, hours), cells in rows.items():
    expected = goodput_model.expected_goodput(
      fault_every_seconds=hours * 3600,
      restart_seconds=costs.restart_seconds,
      save_seconds=costs.save_seconds,
    )
    price = 1.0 if vm == "Spot" else 3.0
    assert float(cells[3].rstrip("%")) == pytest.approx(
      expected.goodput_percent, abs=0.05
    )
    assert float(cells[5]) == pytest.approx(
      100 * price / expected.goodput_percent, rel=1e-3
    )
  # A third of the price pays for itself even at a preemption every 15 min.
  assert float(rows["Spot", 0.25][5]) < float(rows["on-demand", 720.0][5])


@pytest.mark.processes
def test_a_spot_price_without_an_on_demand_price_is_one_sentence(
  model_dir, capsys
):
  with pytest.raises(SystemExit) as exit_info:
    report.main([model_dir, "--png=", "--spot_price=1"])
  assert exit_info.value.code == USER_ERROR_EXIT_CODE
  assert "go together" in capsys.readouterr().err


def _one_start(model_dir) -> str:
  """`model_dir` with a ledger of one start that ended at once, written
  here (no process)."""
  directory = ledger_reader.ledger_dir(str(model_dir))
  os.makedirs(directory)
  started = time.time()
  with open(os.path.join(directory, f"0{ledger_reader.SUFFIX}"), "w") as f:
    for event in (
      {"event": "start", "time": started},
      {"event": "end", "time": started + 1, "step": 0, "outcome": "done"},
    ):
      f.write(json.dumps(event) + "\n")
  return str(model_dir)


def test_a_png_path_that_is_a_directory_is_one_sentence_and_exit_2(
  tmp_path, capsys
):
  """--png=DIR said "Timeline: DIR" and wrote DIR.png beside it."""
  model_dir = _one_start(tmp_path / "run")
  with pytest.raises(SystemExit) as exit_info:
    report.main([model_dir, f"--png={tmp_path}"])
  assert exit_info.value.code == USER_ERROR_EXIT_CODE
  [line] = capsys.readouterr().err.strip().splitlines()
  assert line.startswith(f"error: --png={tmp_path} is a directory"), line
  assert not os.path.exists(f"{tmp_path}.png")


def test_a_png_in_a_missing_directory_is_one_sentence_and_exit_2(
  tmp_path, capsys
):
  """It was matplotlib's traceback, after the report was printed."""
  model_dir = _one_start(tmp_path / "run")
  png = tmp_path / "missing" / "timeline.png"
  with pytest.raises(SystemExit) as exit_info:
    report.main([model_dir, f"--png={png}"])
  assert exit_info.value.code == USER_ERROR_EXIT_CODE
  [line] = capsys.readouterr().err.strip().splitlines()
  assert line.startswith(f"error: --png={png}: no directory "), line


def test_a_png_in_a_kernel_filesystem_is_one_sentence_and_exit_2(
  tmp_path, capsys
):
  """It was matplotlib's traceback (FileNotFoundError), after the report
  was printed: /proc is a directory, but no file can be made in it."""
  model_dir = _one_start(tmp_path / "run")
  with pytest.raises(SystemExit) as exit_info:
    report.main([model_dir, "--png=/proc/timeline.png"])
  assert exit_info.value.code == USER_ERROR_EXIT_CODE
  [line] = capsys.readouterr().err.strip().splitlines()
  assert line.startswith("error: --png=/proc/timeline.png: Cannot use /proc")
  assert "kernel filesystem" in line, line


def test_a_default_png_that_cannot_be_written_is_a_note_after_the_report(
  tmp_path, capsys
):
  """The picture nobody named (`<model_dir>/goodput_timeline.png`) cannot
  be written there (here its name is a directory; a run directory read by
  someone without write permission is another case): the report is still
  printed and the command exits 0, with one line that says so and how to
  name another file. It was matplotlib's traceback, exit 1."""
  model_dir = _one_start(tmp_path / "run")
  os.mkdir(os.path.join(model_dir, report.PNG_NAME))
  report.main([model_dir])
  out = capsys.readouterr().out
  assert "done" in out  # The report.
  last = out.strip().splitlines()[-1]
  assert last.startswith(
    f"No timeline: cannot write {os.path.join(model_dir, report.PNG_NAME)} ("
  ), last
  assert last.endswith("; name another file with --png=FILE."), last


def test_a_named_png_that_cannot_be_written_is_one_sentence_and_exit_74(
  tmp_path, capsys
):
  """A --png that passes the checks and fails at the write (here a link
  to a directory that does not exist; a full disk is another case)."""
  model_dir = _one_start(tmp_path / "run")
  png = tmp_path / "timeline.png"
  png.symlink_to(tmp_path / "missing" / "timeline.png")
  with pytest.raises(SystemExit) as exit_info:
    report.main([model_dir, f"--png={png}"])
  assert exit_info.value.code == CANNOT_WRITE_EXIT_CODE
  [line] = capsys.readouterr().err.strip().splitlines()
  assert line == f"error: cannot write {png} (No such file or directory).", line


def test_the_png_is_written_under_the_name_given(tmp_path, capsys):
  """--png=NAME without an extension said "Timeline: NAME" and wrote
  NAME.png."""
  model_dir = _one_start(tmp_path / "run")
  png = tmp_path / "timeline"
  report.main([model_dir, f"--png={png}"])
  assert f"Timeline: {png}\n" in capsys.readouterr().out
  assert png.read_bytes().startswith(b"\x89PNG")
  assert not os.path.exists(f"{png}.png")


@pytest.mark.usefixtures("storage_not_answering")
def test_cloud_storage_that_does_not_answer_is_one_sentence_in_a_bound(capsys):
  """A host name that resolves but a Cloud Storage that does not answer (a
  refused connection, a server that never replies): gcsfs retried for about
  50 s, or waited for ever, before the report said anything; now one
  request is given storage.ANSWER_SECS."""
  with pytest.raises(SystemExit) as exit_info:
    report.main(["gs://test-bucket/run", "--png="])
  assert exit_info.value.code == USER_ERROR_EXIT_CODE
  [line] = capsys.readouterr().err.strip().splitlines()
  assert line.startswith(
    "error: Cloud Storage did not answer within 2 s for gs://test-bucket/run"
  ), line
  assert line.endswith("; check the network, then run again."), line


def test_cloud_storage_that_cannot_be_resolved_is_one_sentence(
  monkeypatch, capsys
):
  """Offline, gcsfs retried for about 50 s before the report said anything;
  now the trainer's check of the host name comes first."""
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://no-such-host.invalid:9")
  with pytest.raises(SystemExit) as exit_info:
    report.main(["gs://test-bucket/run", "--png="])
  assert exit_info.value.code == USER_ERROR_EXIT_CODE
  [line] = capsys.readouterr().err.strip().splitlines()
  assert line.startswith(
    "error: Cannot reach Cloud Storage for gs://test-bucket/run"
  ), line
