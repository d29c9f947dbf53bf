"""Tests for ctl.checkpoint.save_policy: saves by steps, by time, "auto", requested."""

import pytest

from ctl.checkpoint import save_policy
from ctl.telemetry import goodput


def _policy(**kwargs):
  fields = dict(
    every_steps=20,
    every_secs=0,
    expected_mtbf_secs=3600.0,
    train_steps=100,
    is_chief=True,
  )
  return save_policy.SavePolicy(**{**fields, **kwargs})


def test_saves_at_multiples_of_every_steps_but_not_the_last_step():
  policy = _policy()
  policy.start()
  due = [
    s for s in range(10, 101, 10) if policy.due_after_loop(s, requested=False)
  ]
  assert due == [20, 40, 60, 80]  # 100 is saved by the finishing steps.


def test_a_requested_save_is_taken_at_any_step_before_the_last():
  policy = _policy(every_steps=0)
  assert policy.due_after_loop(13, requested=True)
  assert not policy.due_after_loop(100, requested=True)
  assert not policy.due_after_loop(13, requested=False)


def test_time_interval_zero_is_never_due_and_a_positive_one_is_due_after_it():
  never = _policy(every_secs=0)
  never.start()
  assert not never.due_by_time()
  at_once = _policy(every_secs=1e-9)
  at_once.saved(0)
  assert at_once.due_by_time()
  assert at_once.summary() == {}  # Only "auto" explains itself.


def test_only_the_chief_decides_a_save_by_time():
  worker = _policy(every_secs=1e-9, is_chief=False)
  worker.saved(0)
  assert not worker.due_by_time()


def test_auto_with_no_save_measured_saves_at_once_to_measure_one():
  policy = _policy(every_secs="auto", expected_mtbf_secs=3600.0)
  policy.start()
  assert policy.seconds == 0.0 and policy.due_by_time()
  summary = policy.summary()["checkpoint_every_secs"]
  assert summary["seconds"] == 0.0
  assert "no checkpoint save measured yet" in summary["why"]


def test_saved_and_restored_record_the_last_step():
  policy = _policy()
  policy.restored(40)
  assert policy.last_step == 40
  policy.saved(60)
  assert policy.last_step == 60


def test_auto_interval_follows_the_failures_the_ledger_saw():
  def attempt(start, saves, end=None):
    events = [{"event": "start", "time": start}]
    for t0, seconds in saves:
      events.append(
        {
          "event": "phase",
          "phase": "checkpoint_save",
          "t0": t0,
          "t1": t0 + seconds,
          "step0": 0,
          "step": 0,
          "ok": True,
        }
      )
    if end:
      events.append({"event": "end", "time": end, "step": 0, "outcome": "done"})
    return events

  never_failed = goodput.account([attempt(0.0, [(1.0, 3.0)], end=100.0)])
  seconds, why = save_policy.checkpoint_interval(
    never_failed, expected_mtbf_secs=600.0
  )
  assert seconds == pytest.approx((2 * 3.0 * 600.0) ** 0.5)
  assert "expected_mtbf_secs" in why
  failed_once = goodput.account(
    [attempt(0.0, [(1.0, 1.0), (10.0, 3.0)]), attempt(50.0, [], end=200.0)]
  )
  seconds, why = save_policy.checkpoint_interval(
    failed_once, expected_mtbf_secs=600.0
  )
  assert seconds == pytest.approx((2 * 2.0 * 200.0) ** 0.5)
  assert "1 failure(s)" in why
  assert save_policy.checkpoint_interval(None, expected_mtbf_secs=600.0)[0] == 0
