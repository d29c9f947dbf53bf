"""ctl.launch.heartbeats: the launcher reads the workers' watchdog heartbeats."""

import json
import os
import time

import pytest

from ctl.launch import heartbeats


def _beat(directory, rank, *, deadline, phase="train_loop", step=40):
  record = {"deadline": deadline, "limit": 20.0, "phase": phase, "step": step}
  with open(os.path.join(directory, f"worker-{rank}.json"), "w") as f:
    json.dump(record, f)


def test_the_directory_is_made_and_must_be_new(tmp_path):
  directory = str(tmp_path / "beats")
  heartbeats.Heartbeats(directory, grace_secs=1)
  assert os.path.isdir(directory)
  with pytest.raises(FileExistsError):  # Never another start's old beats.
    heartbeats.Heartbeats(directory, grace_secs=1)


def test_a_missing_or_half_written_heartbeat_reads_as_none_yet(tmp_path):
  beats = heartbeats.Heartbeats(str(tmp_path / "beats"), grace_secs=1)
  assert beats.read(0) == {}
  with open(os.path.join(beats.directory, "worker-0.json"), "w") as f:
    f.write('{"deadline": 12')
  assert beats.read(0) == {}
  assert beats.stalled_at(0) == ""


def test_only_a_beat_past_its_deadline_and_the_grace_is_overdue(
  tmp_path, capsys
):
  grace = 3600  # However long the checks below take, within it.
  beats = heartbeats.Heartbeats(str(tmp_path / "beats"), grace_secs=grace)
  now = time.monotonic()
  _beat(beats.directory, 0, deadline=now + 60)
  _beat(beats.directory, 1, deadline=now - 2)  # Late, but within the grace.
  assert beats.overdue([0, 1, 2]) is None
  assert capsys.readouterr().err == ""

  late = now - grace - 30
  _beat(beats.directory, 1, deadline=late, phase="evaluation", step=7)
  assert beats.overdue([0, 1, 2]) == 1
  line = capsys.readouterr().err.strip()
  assert line.startswith("[launcher] worker 1 made no progress for ")
  assert line.endswith(
    " s in evaluation at step 7 and its watchdog did not act (a frozen "
    "process?)"
  )
  assert beats.stalled_at(1) == " at step 7 in evaluation"


def test_a_start_is_steady_once_a_worker_trains_past_its_first_loop(tmp_path):
  beats = heartbeats.Heartbeats(str(tmp_path / "beats"), grace_secs=1)
  far = time.monotonic() + 3600
  assert not beats.steady([0, 1])  # No beat yet.
  _beat(beats.directory, 0, deadline=far, phase="startup")
  _beat(beats.directory, 1, deadline=far, phase="first_loop")
  assert not beats.steady([0, 1])  # Still on its critical path.
  _beat(beats.directory, 1, deadline=far, phase="train_loop")
  assert beats.steady([0, 1]) and not beats.steady([0])
