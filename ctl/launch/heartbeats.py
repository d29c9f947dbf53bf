"""The launcher's second line of defence against stalls: worker heartbeats.

Each worker's stall watchdog (ctl.resilience.watchdog) keeps `worker-<rank>.json` current
in the directory the launcher names in `CTL_HEARTBEAT_DIR`: its phase, step,
limit and deadline (`time.monotonic()`: same host, same clock). A worker past
that deadline by a grace period is frozen (SIGSTOP, a stuck kernel call), or
its watchdog cannot run; the launcher then stops it as stalled.
"""

import json
import os
import time

from ctl.launch import output_relay
from ctl.telemetry import progress


class Heartbeats:
  """The heartbeat files of one start of the workers."""

  def __init__(self, directory: str, *, grace_secs: float):
    """Creates `directory` (the workers' `CTL_HEARTBEAT_DIR`).

    Args:
      directory: where the workers' watchdogs write; must not exist yet.
      grace_secs: how long past its deadline a heartbeat may be.
    """
    os.makedirs(directory)
    self.directory = directory
    self._grace_secs = grace_secs

  def read(self, rank: int) -> dict:
    """Worker `rank`'s last heartbeat ({} if none yet or unreadable)."""
    path = os.path.join(self.directory, f"worker-{rank}.json")
    try:
      with open(path) as f:
        return json.load(f)
    except (OSError, ValueError):
      return {}

  def overdue(self, ranks) -> int | None:
    """The first of `ranks` whose watchdog is overdue (it cannot act), or None.

    Says which, for how long and where, in one launcher line.
    """
    now = time.monotonic()
    for rank in sorted(ranks):
      beat = self.read(rank)
      if beat and now > beat["deadline"] + self._grace_secs:
        output_relay.log(
          f"worker {rank} made no progress for"
          f" {now - beat['deadline'] + beat['limit']:.0f} s in"
          f" {beat['phase']} at step {beat['step']} and its watchdog did"
          " not act (a frozen process?)"
        )
        return rank
    return None

  def steady(self, ranks) -> bool:
    """Whether one of `ranks` trains in a loop past its first: its start's
    critical path (start-up, restore, tracing) is over."""
    return any(
      self.read(rank).get("phase") == progress.TRAIN_LOOP for rank in ranks
    )

  def stalled_at(self, rank: int) -> str:
    """Where worker `rank` stalled, as " at step S in PHASE", or ""."""
    beat = self.read(rank)
    return f" at step {beat['step']} in {beat['phase']}" if beat else ""
