"""Supervision: start the workers, and start them again when one fails.

When a worker fails, the others stop (MultiWorkerMirroredStrategy cannot go
on without it) and, if restarts are left, all start again after an
exponential backoff; the trainer resumes from its checkpoint. They get
SIGTERM, which gives them their agreed save, unless the failed worker was
killed by another signal (SIGKILL, a crash): an agreed save needs every
worker, so theirs could only fail, and they are killed at once
(`stop_signal`). A user error
(exit 2) is never restarted: a restart cannot fix it; nor is a writer
whose lease another trainer took over (exit 77). A stall (exit 75, or a
heartbeat past its deadline) is restarted like a crash and reported with its
place; one that comes back at the same place is said not to be transient.
"""

import collections
from collections.abc import Callable, Mapping, Sequence
import dataclasses
import os
import queue
import signal
import tempfile
import time

from ctl import env
from ctl.errors import LEASE_LOST_EXIT_CODE
from ctl.errors import STALL_EXIT_CODE
from ctl.errors import USER_ERROR_EXIT_CODE
from ctl.launch import heartbeats as heartbeats_lib
from ctl.launch import output_relay
from ctl.launch import reaper
from ctl.launch import workers as workers_lib

MAX_BACKOFF_SECS = 300.0
# Exit codes a restart cannot fix, and why: they end the job at once.
_FINAL_CODES = {
  USER_ERROR_EXIT_CODE: (
    "a user error (bad flag, environment or files) that a restart cannot fix"
  ),
  LEASE_LOST_EXIT_CODE: (
    "its run directory's lease was taken over by another trainer, which now "
    "owns it"
  ),
}
# A worker killed by one of these may have handled it with the agreed save
# (ctl.resilience.preemption), its peers saving with it.
_SAVE_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The shortest pause between restarts, whatever --restart_backoff_secs says:
# a worker that fails at once must not make the launcher spin.
MIN_PAUSE_SECS = 0.5


@dataclasses.dataclass(frozen=True)
class Policy:
  """How failures are handled; fields match the launcher's flags.

  Attributes:
    max_restarts: Restarts after a worker exits abnormally.
    restart_backoff_secs: Wait before the first restart; doubles every restart.
    grace_secs: How long stopped workers may take to exit before SIGKILL.
    heartbeat_grace_secs: How long past its watchdog's deadline a worker's
      heartbeat may be before the worker is treated as stalled.
  """

  max_restarts: int = 0
  restart_backoff_secs: float = 1.0
  grace_secs: float = 10.0
  heartbeat_grace_secs: float = 30.0


def stop_signal(code: int) -> int:
  """The signal that stops the other workers after one ended with `code`.

  SIGTERM asks them for their agreed save at the next loop boundary. That
  save needs every worker, so after one was killed by any other signal
  (SIGKILL, SIGSEGV: it saved nothing and never will) the survivors would
  only wait in their collective until it failed: 2-10 s of every
  whole-cluster restart after a hard kill (benchmarks' `restart` section),
  and the grace period at worst. They are killed at once instead. What
  they had saved stays whole: a checkpoint is committed whole or not at all
  (docs/design.md, "Contracts"), a local tier's step stays on the node for
  the restart, and a copy to the bucket cut short is not committed.
  """
  if code < 0 and -code not in _SAVE_SIGNALS:
    return signal.SIGKILL
  return signal.SIGTERM


def restart_pause_secs(*, base_secs: float, restart: int) -> float:
  """The pause before restart number `restart` (1, 2, ...).

  `base_secs` doubles with every restart up to `MAX_BACKOFF_SECS`, and is
  never below `MIN_PAUSE_SECS`; the exponent is capped, so any restart count
  is fine.
  """
  doublings = min(restart - 1, 32)  # 2**32 times any base > 0 is past the cap.
  return max(MIN_PAUSE_SECS, min(base_secs * 2**doublings, MAX_BACKOFF_SECS))


def supervise(
  command: Sequence[str],
  tasks: Callable[[], Sequence[workers_lib.Task]],
  *,
  job_id: str,
  policy: Policy,
  events: queue.SimpleQueue,
  relay_output: bool = True,
  warm_spare: bool = False,
  worker_env: Mapping[str, str] | None = None,
  after_failure: Callable[[], None] = lambda: None,
) -> int:
  """Runs the workers until all succeed, one fails for good, or a signal comes.

  Args:
    command: The worker command line.
    tasks: The workers of each start (called once per start).
    job_id: Every start's `CTL_JOB_ID`: a restarted chief takes over the run
      directory's lease its killed predecessor held (ctl.resilience.lease).
    policy: How failures are handled.
    events: Where the caller posts ("signal", signum) for SIGINT and SIGTERM.
    relay_output: Prefix the workers' output lines (`workers.Workers`).
    warm_spare: Keep the next start's worker process started and warm
      (`workers.Spare`, one worker a start: the node agent's).
    worker_env: More variables for every start (the node agent's tier
      service, ctl.checkpoint.tiers.peer_tier).
    after_failure: Called once a failed start's workers have all exited
      (the node agent persists its worker's newest local checkpoint).

  Returns:
    0 when every worker exited 0; the code of the worker that failed last
    (128 + N for a worker killed by signal N); 128 + N when the launcher
    itself got signal N.
  """
  with (
    reaper.Reaper() as guard,
    tempfile.TemporaryDirectory(prefix="ctl-heartbeats-") as heartbeats,
  ):
    guard.remove_dir(heartbeats)
    starts = _Starts(
      command,
      tasks,
      events,
      heartbeats,
      guard,
      relay_output,
      warm_spare,
      job={env.JOB_ID: job_id, **(worker_env or {})},
    )
    try:
      return _Supervisor(starts, policy, events, after_failure).run()
    finally:
      starts.discard_spare()


@dataclasses.dataclass
class _Starts:
  """Starts the workers again and again, each start told how the last ended."""

  command: Sequence[str]
  tasks: Callable[[], Sequence[workers_lib.Task]]
  events: queue.SimpleQueue
  heartbeat_root: str
  guard: reaper.Reaper
  relay_output: bool
  warm_spare: bool = False
  count: int = 0
  spare: workers_lib.Spare | None = None  # For the next start.
  # What every start is given: the job id and the node agent's variables.
  job: dict[str, str] = dataclasses.field(default_factory=dict)
  previous_exit: dict[str, str] = dataclasses.field(default_factory=dict)

  def start(self, policy: Policy) -> workers_lib.Workers:
    """Start number `count` (0 is the first), then the next one's spare."""
    spare, self.spare = self.spare, None
    started = workers_lib.Workers(
      self.command,
      self.tasks(),
      env={
        **self.job,
        **self.previous_exit,
        env.RESTART_COUNT: str(self.count),
      },
      generation=self.count,
      events=self.events,
      heartbeats=heartbeats_lib.Heartbeats(
        os.path.join(self.heartbeat_root, str(self.count)),
        grace_secs=policy.heartbeat_grace_secs,
      ),
      guard=self.guard,
      relay_output=self.relay_output,
      spare=spare,
    )
    if self.warm_spare and self.count < policy.max_restarts:
      self.spare = workers_lib.Spare(
        self.command,
        env=self.job,
        guard=self.guard,
        relay_output=self.relay_output,
      )
    return started

  def spare_to_full_priority(self) -> None:
    """The start trains steadily: its spare may import at full speed."""
    if self.spare is not None:
      self.spare.full_priority()

  def discard_spare(self) -> None:
    """Ends the spare no start will use."""
    if self.spare is not None:
      self.spare.discard()
      self.spare = None

  def ended(self, code: int) -> None:
    """Records how the last start ended (its failed worker's code, or 0)."""
    self.previous_exit = {
      env.PREVIOUS_EXIT: str(code),
      env.PREVIOUS_EXIT_TIME: f"{time.time():.3f}",
    }


class _Supervisor:
  """The restart loop: start, wait for a failure, stop, decide, pause."""

  def __init__(self, starts: _Starts, policy: Policy, events, after_failure):
    self._starts = starts
    self._after_failure = after_failure
    self._policy = policy
    self._events = events
    self._stalls = collections.Counter()  # "at step S in PHASE" -> times.

  def run(self) -> int:
    """Restarts the workers until the end; the launcher's exit status."""
    while True:
      workers = self._starts.start(self._policy)
      rank, code, signum = workers.wait_for_failure(
        when_steady=self._starts.spare_to_full_priority
      )
      self._starts.ended(code)
      stop_with = signum or stop_signal(code)
      if stop_with == signal.SIGKILL:
        output_relay.log(
          f"worker {rank} was killed by signal {-code}: the others cannot"
          " agree a save without it"
        )
      signum = workers.stop(stop_with, self._policy.grace_secs) or signum
      if rank is not None:
        self._after_failure()
      if signum:
        return 128 + signum
      if rank is None:
        return 0
      final = self._final_code(workers, rank, code)
      if final is not None:
        return final
      signum = self._pause(rank, code)
      if signum:
        return 128 + signum

  def _final_code(
    self, workers: workers_lib.Workers, rank: int, code: int
  ) -> int | None:
    """The exit status if worker `rank`'s failure ends the job, else None."""
    why_final = _FINAL_CODES.get(code)
    if why_final:
      output_relay.log(
        f"not restarting: worker {rank} exited with code {code}, {why_final}"
      )
      return code
    failure = f"exited with code {code}"
    if code == STALL_EXIT_CODE:
      failure = self._stalled(workers, rank, code)
    if self._starts.count == self._policy.max_restarts:
      output_relay.log(
        f"giving up: worker {rank} {failure} and all"
        f" {self._policy.max_restarts} restart(s) (--max_restarts) are used"
      )
      return code if code > 0 else 128 - code
    return None

  def _stalled(self, workers: workers_lib.Workers, rank: int, code: int) -> str:
    """Says where worker `rank` stalled and how often; its failure, worded.

    An exit 75 that the watchdog did not record (no heartbeat says where)
    is a peer lost mid-run or never reached at start-up, which the
    worker's own line names; it is not counted as a stall.
    """
    where = workers.stalled_at(rank)
    if not where:  # Not the watchdog: ctl.PeerLost or ctl.Stalled said why.
      failure = "lost a peer or gave up waiting for one"
      output_relay.log(f"worker {rank} {failure} (exit code {code})")
      return failure
    self._stalls[where] += 1
    times = self._stalls[where]
    failure = "stalled" + {1: "", 2: " twice"}.get(times, f" {times} times")
    output_relay.log(
      f"worker {rank} {failure}{where} (exit code {code})"
      + ("; the stall is not transient" if times > 1 else "")
    )
    return failure + where

  def _pause(self, rank: int, code: int) -> int | None:
    """Counts a restart and waits its backoff; a signal got meanwhile."""
    self._starts.count += 1
    restart = self._starts.count
    backoff = restart_pause_secs(
      base_secs=self._policy.restart_backoff_secs, restart=restart
    )
    output_relay.log(
      f"restart {restart}/{self._policy.max_restarts} after worker {rank}"
      f" exited with code {code}; starting again in {backoff:g}s"
    )
    deadline = time.monotonic() + backoff
    while (left := deadline - time.monotonic()) > 0:
      try:
        event = self._events.get(timeout=left)
      except queue.Empty:
        return None
      if event[0] == "signal":
        return event[1]
    return None
