"""Tests for ctl.telemetry.progress: every listener sees each phase start and end."""

import os

import pytest

from ctl import env
from ctl.telemetry import progress
from ctl.testing import events as events_lib


def _tracker(marks, steps):
  return progress.Progress(
    current_step=lambda: steps[0], listeners=(marks.append,)
  )


def test_a_phase_is_marked_at_its_start_and_end_with_the_steps_it_ran():
  marks, steps = [], [10]
  tracker = _tracker(marks, steps)
  with tracker.phase(progress.TRAIN_LOOP):
    steps[0] = 15
  start, end = marks
  assert (start.phase, start.step, start.started) == ("train_loop", 10, True)
  assert (end.phase, end.step, end.steps, end.ok) == ("train_loop", 15, 5, True)
  assert end.seconds >= 0 and end.time >= start.time


def test_a_phase_that_raises_ends_not_ok_and_the_error_propagates():
  marks = []
  tracker = _tracker(marks, [0])
  with pytest.raises(KeyError):
    with tracker.phase(progress.CHECKPOINT_SAVE):
      raise KeyError("disk")
  assert [m.ok for m in marks] == [True, False]
  assert not marks[1].started
  assert (marks[0].error, marks[1].error) == (None, "KeyError")


def test_a_failing_listener_does_not_stop_the_others():
  marks = []

  def broken(mark):
    raise RuntimeError(mark.phase)

  tracker = progress.Progress(
    current_step=lambda: 0, listeners=(broken, marks.append)
  )
  with tracker.phase(progress.EVALUATION):
    pass
  assert [m.phase for m in marks] == ["evaluation", "evaluation"]


def test_an_unknown_phase_is_refused():
  with pytest.raises(ValueError, match="unknown phase"):
    with _tracker([], [0]).phase("coffee"):
      pass


def test_events_file_appends_one_json_line_per_mark_with_who_marked_it(
  tmp_path,
):
  path = str(tmp_path / "events.jsonl")
  (listener,) = progress.events_from_environ(
    {env.EVENTS: path}, worker=1, attempt=2
  )
  steps = [0]
  tracker = progress.Progress(
    current_step=lambda: steps[0], listeners=(listener,)
  )
  with tracker.phase(progress.TRAIN_LOOP):
    # Each line is in the file as soon as it is marked: a test can follow.
    assert [e["phase"] for e in events_lib.read_events(path)] == ["train_loop"]
    steps[0] = 5
  start, end = events_lib.read_events(path)
  assert (start["step"], start["seconds"]) == (0, None)
  assert (end["step"], end["steps"], end["ok"]) == (5, 5, True)
  for event in (start, end):
    assert (event["worker"], event["attempt"]) == (1, 2)
    assert event["pid"] == os.getpid()
  assert end["monotonic"] >= start["monotonic"]
  assert end["time"] >= start["time"]


def test_events_from_two_writers_interleave_whole_lines(tmp_path):
  path = str(tmp_path / "events.jsonl")
  writers = [
    progress.EventsFile(path=path, worker=w, attempt=0) for w in (0, 1)
  ]
  for step in range(50):
    for writer in writers:
      writer(progress.Mark(phase=progress.TRAIN_LOOP, step=step, time=0.0))
  events = events_lib.read_events(path)
  assert [e["worker"] for e in events] == [0, 1] * 50
  assert events_lib.restored_steps(path) == []


def test_no_events_variable_installs_no_listener():
  assert progress.events_from_environ({}, worker=0, attempt=0) == ()
