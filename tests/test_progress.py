"""Tests for ctl.progress: every listener sees each phase start and end."""

import pytest

from ctl import progress


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
