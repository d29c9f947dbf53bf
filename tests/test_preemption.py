"""ctl.resilience.preemption: SIGTERM becomes a flag, and only inside the block."""

import os
import signal
import threading

import pytest

from ctl import errors
from ctl.resilience import preemption


def _wait_for(predicate):
  """Gives the interpreter a chance to run a pending Python signal handler."""
  event = threading.Event()
  for _ in range(1000):
    if predicate():
      return True
    event.wait(0.01)
  return predicate()


@pytest.fixture
def previous_handler():
  """A recognizable SIGTERM handler installed for the test, then restored."""
  received = []

  def handler(signum, frame):
    del frame
    received.append(signum)

  original = signal.signal(signal.SIGTERM, handler)
  yield handler, received
  signal.signal(signal.SIGTERM, original)


def test_sigterm_sets_requested_and_the_old_handler_comes_back(
  previous_handler,
):
  handler, received = previous_handler
  with preemption.StopRequest() as stop:
    assert not stop.requested
    assert signal.getsignal(signal.SIGTERM) is not handler
    os.kill(os.getpid(), signal.SIGTERM)
    assert _wait_for(lambda: stop.requested)
  assert stop.requested  # The request outlives the block.
  assert received == []  # Recorded instead of handled the old way.
  assert signal.getsignal(signal.SIGTERM) is handler

  os.kill(os.getpid(), signal.SIGTERM)
  assert _wait_for(lambda: received == [signal.SIGTERM])


def test_handler_is_restored_when_the_block_raises(previous_handler):
  handler, _ = previous_handler
  with pytest.raises(errors.Preempted):
    with preemption.StopRequest():
      raise errors.Preempted(7)
  assert signal.getsignal(signal.SIGTERM) is handler


def test_other_signals_can_be_listed(previous_handler):
  del previous_handler
  original = signal.getsignal(signal.SIGUSR1)
  with preemption.StopRequest(signals=(signal.SIGUSR1,)) as stop:
    os.kill(os.getpid(), signal.SIGUSR1)
    assert _wait_for(lambda: stop.requested)
  assert signal.getsignal(signal.SIGUSR1) is original


def test_outside_the_main_thread_no_handler_is_installed(previous_handler):
  handler, _ = previous_handler
  seen = []

  def enter():
    with preemption.StopRequest() as stop:
      seen.append((signal.getsignal(signal.SIGTERM), stop.requested))

  thread = threading.Thread(target=enter)
  thread.start()
  thread.join()
  assert seen == [(handler, False)]
  assert signal.getsignal(signal.SIGTERM) is handler


def test_preempted_says_where_it_stopped_and_how_to_continue():
  error = errors.Preempted(120)
  assert error.step == 120
  assert "step 120" in str(error) and "again" in str(error)
  # The conventional status of a process ended by SIGTERM.
  assert errors.PREEMPTED_EXIT_CODE == 128 + signal.SIGTERM
