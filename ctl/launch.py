"""Local multi-worker launcher and supervisor: N worker processes on loopback.

  python -m ctl.launch --num_workers=2 --max_restarts=3 -- \
      python -m trainer.task --flagfile=configs/quickstart.cfg

starts the command twice, each with the TF_CONFIG of one worker of a loopback
cluster, and prefixes every output line with `[worker i] `. When a worker
fails, MultiWorkerMirroredStrategy cannot go on without it, so the launcher
stops the others at once and, if restarts are left, starts the whole cluster
again after an exponential backoff (the trainer resumes from its checkpoint;
it can read the restart number from `CTL_RESTART_COUNT`, and how the previous
start ended from `CTL_PREVIOUS_EXIT`: the failed worker's exit code, or -N
when signal N killed it, as `subprocess` reports it, plus
`CTL_PREVIOUS_EXIT_TIME`, when that was, in seconds since the epoch; the run
ledger records both). Every start gets the same `CTL_JOB_ID` (kept from the
launcher's environment, else a new one), so a restarted chief takes the run
directory's lease at once (ctl.lease). SIGINT and SIGTERM
are forwarded to every worker, and whatever has not exited after a grace
period is killed, so no worker process outlives the launcher. Not even a
launcher killed by SIGKILL: its workers get a parent-death signal, and a
reaper process kills what is left and removes its files (ctl.reaper).

Stalls: a worker whose stall watchdog (ctl.watchdog) ended it is restarted
like a crash, and said to have stalled, with its phase and step; a stall that
comes back at the same place is reported as not transient. As a second line
of defence the launcher reads each worker's heartbeat file (in the directory
it passes as `CTL_HEARTBEAT_DIR`) and stops the cluster when a worker is
past its watchdog's deadline by `--heartbeat_grace_secs` (a frozen process,
or a watchdog that cannot run).
"""

import argparse
import collections
from collections.abc import Sequence
import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, TextIO
import uuid

from ctl import cluster
from ctl import errors
from ctl import lease
from ctl import reaper
from ctl import watchdog
from ctl.errors import STALL_EXIT_CODE
from ctl.errors import USER_ERROR_EXIT_CODE
from ctl.errors import UserError

RESTART_COUNT_ENV = "CTL_RESTART_COUNT"
PREVIOUS_EXIT_ENV = "CTL_PREVIOUS_EXIT"
PREVIOUS_EXIT_TIME_ENV = "CTL_PREVIOUS_EXIT_TIME"
JOB_ID_ENV = lease.JOB_ID_ENVS[0]
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
MAX_BACKOFF_SECS = 300.0
# The shortest pause between restarts, whatever --restart_backoff_secs says:
# a worker that fails at once must not make the launcher spin.
MIN_PAUSE_SECS = 0.5
_OUTPUT_LOCK = threading.Lock()  # Keeps lines from different workers whole.
_HEARTBEAT_POLL_SECS = 1.0


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
  """What to run and how to supervise it; fields match the command-line flags.

  Attributes:
    command: The worker command line, run once per worker.
    num_workers: Number of worker processes.
    port_base: Worker i listens on port `port_base + i`; None picks free ports
      (fresh ones on every restart).
    max_restarts: How many times the whole cluster is restarted after a worker
      exits abnormally (non-zero code or killed by a signal).
    restart_backoff_secs: Wait before the first restart; doubles every restart.
    grace_secs: How long stopped workers may take to exit before SIGKILL.
    heartbeat_grace_secs: How long past its watchdog's deadline a worker's
      heartbeat may be before the launcher treats the worker as stalled.
  """

  command: tuple[str, ...]
  num_workers: int
  port_base: int | None = None
  max_restarts: int = 0
  restart_backoff_secs: float = 1.0
  grace_secs: float = 10.0
  heartbeat_grace_secs: float = 30.0

  def __post_init__(self):
    if not self.command:
      raise UserError(
        "no worker command given: put it after '--', e.g."
        " ctl-launch --num_workers=2 -- python -m trainer.task."
      )
    if self.num_workers < 1:
      raise UserError(
        f"--num_workers must be at least 1, got {self.num_workers}."
      )
    if self.port_base is not None and not (
      1024 <= self.port_base <= 65536 - self.num_workers
    ):
      raise UserError(
        f"--port_base={self.port_base} leaves no room for"
        f" {self.num_workers} ports between 1024 and 65535."
      )
    if self.max_restarts < 0:
      raise UserError(
        f"--max_restarts must be 0 or more, got {self.max_restarts}."
      )
    if (
      min(self.restart_backoff_secs, self.grace_secs, self.heartbeat_grace_secs)
      < 0
    ):
      raise UserError(
        "--restart_backoff_secs, --grace_secs and"
        " --heartbeat_grace_secs must be 0 or more."
      )


def run(options: LaunchOptions) -> int:
  """Runs the workers until all succeed, one fails for good, or a signal comes.

  Must be called from the main thread: SIGINT and SIGTERM are handled (and
  forwarded to the workers) while it runs.

  Args:
    options: What to run.

  Returns:
    The exit status for the launcher: 0 when every worker exited 0; the code
    of the worker that failed last (128 + N for a worker killed by signal N);
    128 + N when the launcher itself got signal N.

  Raises:
    UserError: If the command cannot be started.
  """
  events = queue.SimpleQueue()  # Its put() is safe in a signal handler.
  previous = {
    signum: signal.signal(signum, lambda s, _: events.put(("signal", s)))
    for signum in _FORWARDED_SIGNALS
  }
  try:
    return _supervise(options, events)
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)


def _supervise(options: LaunchOptions, events: queue.SimpleQueue) -> int:
  """Starts the cluster and restarts it as `options` allow."""
  with (
    reaper.Reaper() as guard,
    tempfile.TemporaryDirectory(prefix="ctl-heartbeats-") as heartbeats,
  ):
    guard.remove_dir(heartbeats)
    return _restart_loop(options, events, heartbeats, guard)


def _restart_loop(
  options: LaunchOptions,
  events: queue.SimpleQueue,
  heartbeats: str,
  guard: reaper.Reaper,
) -> int:
  restart = 0
  # One id for every start of this cluster: a restarted chief takes over
  # the run directory's lease its killed predecessor held (ctl.lease).
  job = {JOB_ID_ENV: os.environ.get(JOB_ID_ENV) or uuid.uuid4().hex}
  previous_exit = job
  stalls = collections.Counter()  # "at step S in PHASE" -> times.
  while True:
    workers = _Workers(
      options,
      restart_count=restart,
      events=events,
      previous_exit=previous_exit,
      heartbeat_dir=os.path.join(heartbeats, str(restart)),
      guard=guard,
    )
    index, code, signum = workers.wait_for_failure()
    previous_exit = {
      **job,
      PREVIOUS_EXIT_ENV: str(code),
      PREVIOUS_EXIT_TIME_ENV: f"{time.time():.3f}",
    }
    signum = (
      workers.stop(signum or signal.SIGTERM, options.grace_secs) or signum
    )
    if signum:
      return 128 + signum
    if index is None:
      return 0
    if code == USER_ERROR_EXIT_CODE:
      _log(
        f"not restarting: worker {index} exited with code {code}, a user "
        "error (bad flag, environment or files) that a restart cannot fix"
      )
      return code
    failure = f"exited with code {code}"
    if code == STALL_EXIT_CODE:
      where = workers.stalled_at(index)
      stalls[where] += 1
      times = {1: "", 2: " twice"}.get(stalls[where], f" {stalls[where]} times")
      failure = f"stalled{times}{where}"
      _log(
        f"worker {index} {failure} (exit code {code})"
        + ("; the stall is not transient" if stalls[where] > 1 else "")
      )
    if restart == options.max_restarts:
      _log(
        f"giving up: worker {index} {failure} and all"
        f" {options.max_restarts} restart(s) (--max_restarts) are used"
      )
      return code if code > 0 else 128 - code
    restart += 1
    backoff = restart_pause_secs(
      base_secs=options.restart_backoff_secs, restart=restart
    )
    _log(
      f"restart {restart}/{options.max_restarts} after worker {index}"
      f" exited with code {code}; starting again in {backoff:g}s"
    )
    signum = _sleep(events, backoff)
    if signum:
      return 128 + signum


def restart_pause_secs(*, base_secs: float, restart: int) -> float:
  """The pause before restart number `restart` (1, 2, ...).

  `base_secs` doubles with every restart up to `MAX_BACKOFF_SECS`, and is
  never below `MIN_PAUSE_SECS`; the exponent is capped, so any restart count
  is fine.
  """
  doublings = min(restart - 1, 32)  # 2**32 times any base > 0 is past the cap.
  return max(MIN_PAUSE_SECS, min(base_secs * 2**doublings, MAX_BACKOFF_SECS))


class _Workers:
  """One start of the cluster: the worker processes and their helper threads.

  Each worker leads its own session (hence process group), so a signal sent to
  the group reaches the processes it started too. Workers are started from
  the calling thread, which must live as long as the launcher (the main
  thread): their parent-death signal fires when it ends (ctl.reaper), and
  `guard` kills their groups if the launcher dies. A waiter thread per worker
  reports its exit as an event without reaping it: until `stop` reaps it, its
  pid, and so its group id, cannot be reused by an unrelated process.
  """

  def __init__(
    self,
    options: LaunchOptions,
    *,
    restart_count: int,
    events: queue.SimpleQueue,
    previous_exit: dict[str, str],
    heartbeat_dir: str,
    guard: reaper.Reaper,
  ):
    self._events = events
    self._guard = guard
    self._generation = restart_count  # Tells our events from older ones.
    self._procs = []
    self._pumps = []
    self._running = set()
    self._heartbeat_dir = heartbeat_dir
    self._heartbeat_grace_secs = options.heartbeat_grace_secs
    os.makedirs(heartbeat_dir)
    if options.port_base is None:
      ports = cluster.free_ports(options.num_workers)
    else:
      ports = range(options.port_base, options.port_base + options.num_workers)
    addresses = [f"localhost:{port}" for port in ports]
    for index in range(options.num_workers):
      env = dict(os.environ, PYTHONUNBUFFERED="1")  # Lines as they come.
      env[RESTART_COUNT_ENV] = str(restart_count)
      env.update(previous_exit)
      env[watchdog.HEARTBEAT_DIR_ENV] = heartbeat_dir
      env["TF_CONFIG"] = json.dumps(
        {
          "cluster": {"worker": addresses},
          "task": {"type": "worker", "index": index},
        }
      )
      self._start(options.command, index, env)

  def _start(self, command: Sequence[str], index: int, env: dict[str, str]):
    """Starts worker `index` with its output pumps and its waiter."""
    try:
      proc = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        preexec_fn=reaper.die_with_parent(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
      )
    except OSError as e:
      self.stop(signal.SIGKILL, 0)
      raise UserError(
        f"cannot run worker command {command[0]!r}: {e.strerror}."
      ) from None
    self._guard.watch_group(proc.pid)
    self._procs.append(proc)
    self._running.add(index)
    prefix = f"[worker {index}] ".encode()
    for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
      self._pumps.append(_thread(_pump, stream, out, prefix))
    _thread(self._wait, proc.pid, index)

  def _wait(self, pid: int, index: int) -> None:
    """Posts ("exit", generation, index, code) when worker `index` exits."""
    try:
      status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:  # Already reaped by `stop`; nobody waits for it.
      return
    code = status.si_status
    if status.si_code != os.CLD_EXITED:
      code = -code  # Killed by signal `si_status`, as subprocess reports it.
    self._events.put(("exit", self._generation, index, code))

  def _next_exit(self, timeout: float | None = None) -> tuple[int, int] | int:
    """Returns (index, code) of the next worker exit, or a signal number."""
    while True:
      event = self._events.get(timeout=timeout)
      if event[0] == "signal":
        return event[1]
      _, generation, index, code = event
      if generation == self._generation:
        self._running.discard(index)
        return index, code

  def wait_for_failure(self) -> tuple[int | None, int, int | None]:
    """Waits until a worker fails, all exit 0, or the launcher gets a signal.

    Returns:
      (index, code, None) for the first worker that exited abnormally,
      (None, 0, None) when all exited 0, (None, 0, signum) for a signal.
    """
    while self._running:
      try:
        exit_or_signum = self._next_exit(timeout=_HEARTBEAT_POLL_SECS)
      except queue.Empty:
        stalled = self._past_deadline()
        if stalled is not None:
          return stalled, STALL_EXIT_CODE, None
        continue
      if isinstance(exit_or_signum, int):
        return None, 0, exit_or_signum
      index, code = exit_or_signum
      if code:
        return index, code, None
    return None, 0, None

  def _heartbeat(self, index: int) -> dict:
    """Worker `index`'s last heartbeat ({} if none yet or unreadable)."""
    path = os.path.join(self._heartbeat_dir, f"worker-{index}.json")
    try:
      with open(path) as f:
        return json.load(f)
    except (OSError, ValueError):
      return {}

  def _past_deadline(self) -> int | None:
    """A running worker whose watchdog is overdue (it cannot act), or None."""
    now = time.monotonic()  # Heartbeat deadlines: same host, same clock.
    for index in sorted(self._running):
      beat = self._heartbeat(index)
      if beat and now > beat["deadline"] + self._heartbeat_grace_secs:
        _log(
          f"worker {index} made no progress for"
          f" {now - beat['deadline'] + beat['limit']:.0f} s in"
          f" {beat['phase']} at step {beat['step']} and its watchdog did"
          " not act (a frozen process?)"
        )
        return index
    return None

  def stalled_at(self, index: int) -> str:
    """Where worker `index` stalled, as " at step S in PHASE", or ""."""
    beat = self._heartbeat(index)
    return f" at step {beat['step']} in {beat['phase']}" if beat else ""

  def stop(self, signum: int, grace_secs: float) -> int | None:
    """Sends `signum` to every worker, then SIGKILL after the grace period.

    Returns early into SIGKILL on another SIGINT or SIGTERM to the launcher.
    Every worker is reaped on return.

    Args:
      signum: The signal to send first.
      grace_secs: How long to wait for the workers to exit on their own.

    Returns:
      The signal the launcher got meanwhile, or None.
    """
    if self._running:
      _log(
        f"sending {signal.Signals(signum).name} to"
        f" {len(self._running)} running worker(s)"
      )
      self._signal_all(signum)
    deadline = time.monotonic() + grace_secs
    got = None
    while self._running and not got:
      try:
        exit_or_signum = self._next_exit(
          timeout=max(0.0, deadline - time.monotonic())
        )
      except queue.Empty:
        break
      if isinstance(exit_or_signum, int):
        got = exit_or_signum
    # Also kills what a worker that exited on its own left behind.
    self._signal_all(signal.SIGKILL)
    for proc in self._procs:
      proc.wait()
      self._guard.forget_group(proc.pid)
    for pump in self._pumps:
      # Only a process that left the worker's session can keep a pipe open.
      pump.join(timeout=grace_secs)
    return got

  def _signal_all(self, signum: int) -> None:
    for proc in self._procs:
      try:
        os.killpg(proc.pid, signum)
      except ProcessLookupError:
        pass  # The whole group has exited.


def _pump(stream: IO[bytes], out: TextIO, prefix: bytes) -> None:
  """Copies lines from `stream` to `out`, each prefixed with `prefix`."""
  with stream:
    for line in stream:
      with _OUTPUT_LOCK:
        out.buffer.write(prefix + line.rstrip(b"\n") + b"\n")
        out.flush()


def _log(message: str) -> None:
  with _OUTPUT_LOCK:
    print(f"[launcher] {message}", file=sys.stderr, flush=True)


def _thread(target, *args) -> threading.Thread:
  thread = threading.Thread(target=target, args=args, daemon=True)
  thread.start()
  return thread


def _sleep(events: queue.SimpleQueue, secs: float) -> int | None:
  """Sleeps `secs`; returns a signal number if one arrives meanwhile."""
  deadline = time.monotonic() + secs
  while (left := deadline - time.monotonic()) > 0:
    try:
      event = events.get(timeout=left)
    except queue.Empty:
      return None
    if event[0] == "signal":
      return event[1]
  return None


def _parse_args(argv: Sequence[str]) -> LaunchOptions:
  parser = errors.ArgumentParser(
    prog="ctl-launch",
    description="Run a command as N workers of a loopback TF_CONFIG cluster.",
    usage="%(prog)s --num_workers=N [options] -- command [args...]",
  )
  parser.add_argument(
    "--num_workers", type=int, required=True, help="Number of worker processes."
  )
  parser.add_argument(
    "--port_base",
    type=int,
    default=None,
    help="Worker i listens on port_base + i (default: free"
    " ports, fresh on every restart).",
  )
  parser.add_argument(
    "--max_restarts",
    type=int,
    default=0,
    help="Restarts of the cluster after a worker fails.",
  )
  parser.add_argument(
    "--restart_backoff_secs",
    type=float,
    default=1.0,
    help="Wait before the first restart; doubles each"
    f" time, up to {MAX_BACKOFF_SECS:g}s (never under"
    f" {MIN_PAUSE_SECS:g}s).",
  )
  parser.add_argument(
    "--grace_secs",
    type=float,
    default=10.0,
    help="Time stopped workers get before SIGKILL.",
  )
  parser.add_argument(
    "--heartbeat_grace_secs",
    type=float,
    default=30.0,
    help="A worker this long past its stall watchdog's"
    " deadline is stopped as stalled.",
  )
  parser.add_argument(
    "command", nargs=argparse.REMAINDER, help="The worker command, after '--'."
  )
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  return LaunchOptions(
    command=tuple(command),
    num_workers=args.num_workers,
    port_base=args.port_base,
    max_restarts=args.max_restarts,
    restart_backoff_secs=args.restart_backoff_secs,
    grace_secs=args.grace_secs,
    heartbeat_grace_secs=args.heartbeat_grace_secs,
  )


def main(argv: Sequence[str] | None = None) -> None:
  """Entry point of `ctl-launch` and `python -m ctl.launch`; exits."""
  try:
    code = run(_parse_args(sys.argv[1:] if argv is None else argv))
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    code = USER_ERROR_EXIT_CODE
  sys.exit(code)


if __name__ == "__main__":
  main()
