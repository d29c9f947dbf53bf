"""ctl.launch.supervisor: the pause between restarts (the loop: tests/test_launch.py)."""

from ctl.launch import supervisor


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
