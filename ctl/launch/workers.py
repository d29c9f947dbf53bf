"""One start of the worker processes: their environment, exits and stop.

Each worker leads its own session (hence process group), so a signal sent to
the group reaches the processes it started too. Workers are started from the
calling thread, which must live as long as the launcher (its main thread):
their parent-death signal fires when that thread ends, and the reaper kills
their groups if the launcher dies (ctl.launch.reaper). A waiter thread per worker
reports its exit as an event without reaping it: until `stop` reaps it, its
pid, and so its group id, cannot be reused by an unrelated process.
"""

from collections.abc import Callable, Mapping, Sequence
import contextlib
import dataclasses
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

from ctl import env as env_lib
from ctl.distributed import ports
from ctl.errors import STALL_EXIT_CODE
from ctl.errors import UserError
from ctl.launch import heartbeats as heartbeats_lib
from ctl.launch import output_relay
from ctl.launch import reaper
from ctl.launch import spare as spare_lib
from ctl.platform import tf_config

_HEARTBEAT_POLL_SECS = 1.0
_SPARE_EXIT_SECS = 5.0  # For an unused spare to leave on end of its stdin.


@dataclasses.dataclass(frozen=True)
class Task:
  """One worker to start.

  Attributes:
    rank: Its number in logs, events and heartbeat files (the chief is 0).
    env: The variables only it gets (its TF_CONFIG), if any.
  """

  rank: int
  env: Mapping[str, str] = dataclasses.field(default_factory=dict)


def loopback_tasks(num_workers: int, port_base: int | None) -> list[Task]:
  """The workers of a cluster on this machine, each with its TF_CONFIG.

  Worker i listens on `port_base + i`, or on a free port if `port_base` is
  None.
  """
  if port_base is None:
    numbers = ports.free_ports(num_workers)
  else:
    numbers = range(port_base, port_base + num_workers)
  addresses = [f"localhost:{port}" for port in numbers]
  return [
    Task(
      rank=index,
      env={
        tf_config.VARIABLE: json.dumps(
          {
            "cluster": {"worker": addresses},
            "task": {"type": "worker", "index": index},
          }
        )
      },
    )
    for index in range(num_workers)
  ]


def check_ports_free(port_base: int, count: int) -> None:
  """Refuses ports of a loopback cluster that a process here listens on.

  Checked before any worker starts: a worker whose port is taken fails only
  after its cluster's start-up timeout, with a gRPC traceback.

  Raises:
    UserError: naming the first port in use.
  """
  for port in range(port_base, port_base + count):
    with socket.socket() as probe:
      # As a server binds it: a port only in TIME_WAIT is free.
      probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      try:
        probe.bind(("", port))
      except OSError as e:
        raise UserError(
          f"--port_base={port_base}: port {port} is in use on this machine"
          f" ({e.strerror}); pick another --port_base or leave it out to use"
          " free ports."
        ) from None


class Workers:
  """The worker processes of one start, and their helper threads."""

  def __init__(
    self,
    command: Sequence[str],
    tasks: Sequence[Task],
    *,
    env: Mapping[str, str],
    generation: int,
    events: queue.SimpleQueue,
    heartbeats: heartbeats_lib.Heartbeats,
    guard: reaper.Reaper,
    relay_output: bool = True,
    spare: "Spare | None" = None,
  ):
    """Starts one process of `command` per task.

    Args:
      command: The worker command line.
      tasks: The workers to start.
      env: Variables every worker gets on top of the launcher's environment.
      generation: This start's number; tells its exit events from older ones.
      events: Where exits are posted, as ("exit", generation, rank, code).
      heartbeats: The workers' heartbeat directory (`CTL_HEARTBEAT_DIR`).
      guard: The reaper, told about every worker's process group.
      relay_output: Prefix each output line with `[worker RANK] `; else the
        workers write straight to the launcher's stdout and stderr.
      spare: A warm spare of `command` to run the first task in (started
        with the same `relay_output`); a spare that died meanwhile is
        replaced by a new process.

    Raises:
      UserError: If the command cannot be started (nothing is left running).
    """
    self._events = events
    self._generation = generation
    self._heartbeats = heartbeats
    self._guard = guard
    self._procs = []
    self._relays = []
    self._running = set()
    for task in tasks:
      worker_env = base_environment(env)
      worker_env[env_lib.HEARTBEAT_DIR] = heartbeats.directory
      worker_env.update(task.env)
      self._start(command, task.rank, worker_env, relay_output, spare)
      spare = None  # A spare serves one worker.

  def _start(
    self,
    command: Sequence[str],
    rank: int,
    env: dict[str, str],
    relay_output: bool,
    spare: "Spare | None",
  ) -> None:
    """Starts worker `rank` (in `spare` if given) with relays and a waiter."""
    proc = spare.hand_over(env) if spare else None
    try:
      proc = proc or spawn(
        command, env=env, guard=self._guard, relay_output=relay_output
      )
    except OSError as e:
      self.stop(signal.SIGKILL, 0)
      raise UserError(
        f"cannot run worker command {command[0]!r}: {e.strerror}."
      ) from None
    self._procs.append(proc)
    self._running.add(rank)
    if relay_output:
      prefix = f"[worker {rank}] ".encode()
      for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
        self._relays.append(output_relay.start(stream, out, prefix))
    threading.Thread(
      target=self._wait, args=(proc.pid, rank), daemon=True
    ).start()

  def _wait(self, pid: int, rank: int) -> None:
    """Posts ("exit", generation, rank, code) when worker `rank` exits."""
    try:
      status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:  # Already reaped by `stop`; nobody waits for it.
      return
    code = status.si_status
    if status.si_code != os.CLD_EXITED:
      code = -code  # Killed by signal `si_status`, as subprocess reports it.
    self._events.put(("exit", self._generation, rank, code))

  def _next_exit(self, timeout: float | None = None) -> tuple[int, int] | int:
    """Returns (rank, code) of the next worker exit, or a signal number."""
    while True:
      event = self._events.get(timeout=timeout)
      if event[0] == "signal":
        return event[1]
      _, generation, rank, code = event
      if generation == self._generation:
        self._running.discard(rank)
        return rank, code

  def wait_for_failure(
    self, when_steady: Callable[[], None] | None = None
  ) -> tuple[int | None, int, int | None]:
    """Waits until a worker fails, all exit 0, or the launcher gets a signal.

    A worker past its heartbeat deadline counts as failed with
    `STALL_EXIT_CODE`. `when_steady` is called once, when a worker is first
    seen training past its first loop (`Heartbeats.steady`).

    Returns:
      (rank, code, None) for the first worker that exited abnormally,
      (None, 0, None) when all exited 0, (None, 0, signum) for a signal.
    """
    while self._running:
      try:
        exit_or_signum = self._next_exit(timeout=_HEARTBEAT_POLL_SECS)
      except queue.Empty:
        if when_steady and self._heartbeats.steady(self._running):
          when_steady()
          when_steady = None
        stalled = self._heartbeats.overdue(self._running)
        if stalled is not None:
          return stalled, STALL_EXIT_CODE, None
        continue
      if isinstance(exit_or_signum, int):
        return None, 0, exit_or_signum
      rank, code = exit_or_signum
      if code:
        return rank, code, None
    return None, 0, None

  def stalled_at(self, rank: int) -> str:
    """Where worker `rank` stalled, as " at step S in PHASE", or ""."""
    return self._heartbeats.stalled_at(rank)

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
      output_relay.log(
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
    for relay in self._relays:
      # Only a process that left the worker's session can keep a pipe open.
      relay.join(timeout=grace_secs)
    return got

  def _signal_all(self, signum: int) -> None:
    for proc in self._procs:
      try:
        os.killpg(proc.pid, signum)
      except ProcessLookupError:
        pass  # The whole group has exited.


def base_environment(env: Mapping[str, str]) -> dict[str, str]:
  """What every worker gets: the launcher's environment, then `env`."""
  return dict(os.environ, PYTHONUNBUFFERED="1") | dict(
    env
  )  # Lines as they come.


def spawn(
  command: Sequence[str],
  *,
  env: Mapping[str, str],
  guard: reaper.Reaper,
  relay_output: bool,
  stdin: int | None = None,
) -> subprocess.Popen:
  """Starts one worker process: its own session, dying with the launcher.

  Raises:
    OSError: If `command` cannot be started.
  """
  pipe = subprocess.PIPE if relay_output else None
  proc = subprocess.Popen(
    command,
    env=env,
    start_new_session=True,
    preexec_fn=reaper.die_with_parent(),
    stdin=stdin,
    stdout=pipe,
    stderr=pipe,
  )
  guard.watch_group(proc.pid)
  return proc


class Spare:
  """A warm spare of a `python -m MODULE ...` worker command (ctl.launch.spare).

  Started like a worker (own session, parent-death signal, watched by the
  reaper), so a SIGKILLed launcher takes it along too.
  """

  def __init__(
    self,
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    guard: reaper.Reaper,
    relay_output: bool,
  ):
    """Starts the spare of `command` (see `spare_command`).

    Args:
      command: The worker command, `python -m MODULE ARGS...`.
      env: What every start of the worker gets (`base_environment`); each
        start's own variables come with `hand_over`.
      guard: The reaper, told about the spare's process group.
      relay_output: As for `Workers`: the spare's output is piped.

    Raises:
      OSError: If it cannot be started.
    """
    self._guard = guard
    self._proc = spawn(
      spare_command(command),
      env=base_environment(env),
      guard=guard,
      relay_output=relay_output,
      stdin=subprocess.PIPE,
    )

  @property
  def pid(self) -> int:
    return self._proc.pid

  def hand_over(self, env: Mapping[str, str]) -> subprocess.Popen | None:
    """Runs the worker in the spare with `env`; None if the spare is gone."""
    if self._proc.poll() is not None:
      self.discard()
      return None
    try:
      self._proc.stdin.write(json.dumps(dict(env)).encode() + b"\n")
      self._proc.stdin.close()
    except OSError:  # It died just now.
      self.discard()
      return None
    return self._proc

  def full_priority(self) -> None:
    """Lets the spare finish its imports at the worker's priority (it
    imports lowered while a start's critical path runs beside it)."""
    with contextlib.suppress(OSError):  # It died: hand_over will see.
      self._proc.stdin.write(spare_lib.FULL_PRIORITY_LINE.encode() + b"\n")
      self._proc.stdin.flush()

  def discard(self) -> None:
    """Ends an unused spare (end of its stdin, then SIGKILL) and reaps it."""
    with contextlib.suppress(OSError):
      self._proc.stdin.close()
    try:
      self._proc.wait(timeout=_SPARE_EXIT_SECS)
    except subprocess.TimeoutExpired:
      with contextlib.suppress(ProcessLookupError):
        os.killpg(self._proc.pid, signal.SIGKILL)
      self._proc.wait()
    self._guard.forget_group(self._proc.pid)


def spare_command(command: Sequence[str]) -> list[str]:
  """`python -m ctl.launch.spare MODULE ARGS...` for `python -m MODULE ARGS...`.

  Raises:
    UserError: If `command` is not of that form.
  """
  if len(command) < 3 or command[1] != "-m":
    raise UserError(
      "--warm_spare needs a worker command of the form 'python -m MODULE "
      f"[ARGS...]', not {' '.join(command[:3])!r}."
    )
  return [command[0], "-m", "ctl.launch.spare", *command[2:]]
