"""Tests for ctl.io.retry: what is retried and when retrying stops."""

import pytest

from ctl.io import retry

_QUICK = retry.RetryPolicy(
  deadline_s=60.0, initial_backoff_s=0.01, max_backoff_s=0.01
)


def _failing(errors):
  """A call that raises `errors` one by one, then returns "done"."""
  calls = []

  def fn():
    calls.append(None)
    if len(calls) <= len(errors):
      raise errors[len(calls) - 1]
    return "done"

  return fn, calls


def _is_transient(error):
  return isinstance(error, ConnectionError)


def test_transient_errors_are_retried():
  fn, calls = _failing([ConnectionResetError(), ConnectionRefusedError()])
  assert (
    retry.call(fn, policy=_QUICK, is_transient=_is_transient, what="call")
    == "done"
  )
  assert len(calls) == 3


def test_permanent_error_is_raised_at_once():
  fn, calls = _failing([PermissionError("403")])
  with pytest.raises(PermissionError):
    retry.call(fn, policy=_QUICK, is_transient=_is_transient, what="call")
  assert len(calls) == 1


def test_deadline_raises_the_last_error():
  fn, calls = _failing([ConnectionResetError(), ConnectionRefusedError()])
  policy = retry.RetryPolicy(deadline_s=0.0)
  with pytest.raises(ConnectionResetError):
    retry.call(fn, policy=policy, is_transient=_is_transient, what="call")
  assert len(calls) == 1
