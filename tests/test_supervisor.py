"""ctl.launch.supervisor: the pause between restarts and the signal that
stops the others (the loop: tests/test_launch.py)."""

import signal

import pytest

from ctl.launch import supervisor


@pytest.mark.parametrize(
  "code, others_get",
  [
    (-signal.SIGKILL, signal.SIGKILL),  # Saved nothing, never will.
    (-signal.SIGSEGV, signal.SIGKILL),
    (-signal.SIGTERM, signal.SIGTERM),  # Preempted: may be saving with them.
    (-signal.SIGINT, signal.SIGTERM),
    (143, signal.SIGTERM),  # Its agreed save done.
    (1, signal.SIGTERM),
    (75, signal.SIGTERM),  # A stall: the stalled one is stopped too.
  ],
)
def test_the_others_are_killed_at_once_only_after_a_death_no_save_survives(
  code, others_get
):
  assert supervisor.stop_signal(code) == others_get


def test_the_pause_doubles_from_the_base_up_to_the_cap():
  pauses = [
    supervisor.restart_pause_secs(base_secs=1.0, restart=restart)
    for restart in range(1, 12)
  ]
  assert pauses == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
  assert supervisor.MAX_BACKOFF_SECS == 300


def test_no_pause_is_below_the_floor_and_any_restart_count_is_fine():
  assert supervisor.restart_pause_secs(base_secs=1.0, restart=10**6) == (
    supervisor.MAX_BACKOFF_SECS
  )
  assert supervisor.restart_pause_secs(base_secs=0.0, restart=10**6) == (
    supervisor.MIN_PAUSE_SECS
  )
  assert supervisor.restart_pause_secs(base_secs=0.1, restart=1) == (
    supervisor.MIN_PAUSE_SECS
  )
