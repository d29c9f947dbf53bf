"""Stall watchdog: a worker that is alive but stuck ends itself, and says where.

A `Watchdog` is a `ctl.telemetry.progress` listener. Each mark (a phase starting or
ending) is progress; when the phase in progress runs past its limit, a
thread of the watchdog writes one line to stderr

  stall: worker 1 made no progress for 21 s in train_loop at step 40 (limit
  20 s, --stall_timeout_secs); stacks of all threads follow; exiting with 75.

(where it can, the line also names what the stuck thread waits in: the
library ctl's own innermost frame called, e.g. ", waiting in gcsfs, called
from ctl/resilience/lease_store.py:274 (read)" for a bucket that stopped
answering), then the Python stacks of every thread (`faulthandler`), calls `on_stall`
(best-effort, a few seconds at most), and ends the process with
`STALL_EXIT_CODE` so a supervisor (`ctl.launch`, Vertex AI) restarts it.

Limits: start-up, the first train loop and the first run of every other
phase (each traces, compiles or first writes) get `startup_timeout_secs`;
train loops after the first, and later runs of the others, get
`stall_timeout_secs` or, when that is None, `factor` times the slowest run of
that phase so far and at least `floor_secs`. The controller's bookkeeping between phases gets the steady
limit (the start-up one before the first loop ended).

Trade-off: the watchdog is a Python thread, which can write the line, call
`on_stall` and choose the exit code, but needs the GIL. A stuck call that
holds the GIL (some TensorFlow C++ calls do, e.g. the multi-worker start-up)
would silence it, so the thread also re-arms a backstop process
(ctl.resilience.backstop), which needs no GIL: `BACKSTOP_GRACE_SECS` after the Python
deadline it has the stacks dumped and kills the process (exit 137). A stuck
system call releases the GIL, so the Python thread sees it.

A stopped process (Ctrl-Z, SIGSTOP) makes no progress either: continued
after its limit, it ends as a stall (75), even if the main thread marks
progress before the thread looks (a mark past the limit is a stall); the
backstop does not count stopped time.

With `heartbeat_dir` (set by `ctl.launch` in `CTL_HEARTBEAT_DIR`), the thread
also keeps `worker-<index>.json` there current (phase, step, the deadline),
so the launcher can stop a worker whose watchdog cannot run at all (a frozen
process) and name the phase and step of a stall.
"""

from collections.abc import Callable
import contextlib
import dataclasses
import faulthandler
import json
import os
import sys
import threading
import time
import traceback
from typing import NamedTuple

from ctl.distributed import peers
from ctl.errors import STALL_EXIT_CODE
from ctl.errors import UserError
from ctl.resilience import backstop as backstop_lib
from ctl.telemetry import progress

BACKSTOP_GRACE_SECS = 10.0
_STARTUP_PHASES = (progress.STARTUP, progress.FIRST_LOOP)
# Phases that beat for each item of work (`Watchdog.beat`): the steady limit
# applies to each item from the first run on, as nothing in them traces.
_BEATING_PHASES = (progress.DATA_LISTING,)
# Phases that only enclose others (`ctl.run`'s whole call): time in them
# outside any inner phase is the controller's bookkeeping between phases,
# with its own limit, not a first run of the enclosing phase.
_ENCLOSING_PHASES = (progress.RUN,)
_STARTUP_FLAG = "--startup_timeout_secs"
_STALL_FLAG = "--stall_timeout_secs"
_STDERR = 2  # The descriptor: sys.stderr may be a wrapper (pytest, notebooks).


@dataclasses.dataclass(frozen=True)
class Limits:
  """How long a phase may go without progress.

  Attributes:
    stall_timeout_secs: the steady-state limit; None adapts it (see the module
      docstring); 0 turns the watchdog off.
    startup_timeout_secs: start-up and the first run of each phase.
    floor_secs: the least an adaptive limit can be.
    factor: an adaptive limit is this times the slowest run of its phase.
  """

  stall_timeout_secs: float | None = None
  startup_timeout_secs: float = peers.STARTUP_TIMEOUT_SECS
  floor_secs: float = 120.0
  factor: float = 10.0

  def validate(self) -> None:
    if self.stall_timeout_secs is not None and self.stall_timeout_secs < 0:
      raise UserError(
        "stall_timeout_secs must be >= 0 (0 turns the watchdog "
        f"off), got {self.stall_timeout_secs}."
      )
    if self.startup_timeout_secs <= 0:
      raise UserError(
        f"startup_timeout_secs must be > 0, got {self.startup_timeout_secs}."
      )

  @property
  def enabled(self) -> bool:
    return self.stall_timeout_secs != 0


@dataclasses.dataclass(frozen=True)
class Stall:
  """Where a worker stalled: what `on_stall` receives."""

  worker: int
  phase: str
  step: int
  seconds: float
  limit: float
  flag: str
  doing: str | None = None  # What the last beat said came next.
  waiting_in: str | None = None  # Where the stuck thread waits (`_waiting_in`).

  def message(self) -> str:
    doing = f", {self.doing}" if self.doing else ""
    if self.waiting_in:
      doing += f", waiting in {self.waiting_in}"
    return (
      f"stall: worker {self.worker} made no progress for "
      f"{self.seconds:.0f} s in {self.phase} at step {self.step}{doing} (limit "
      f"{self.limit:g} s, {self.flag}); stacks of all threads follow; "
      f"exiting with {STALL_EXIT_CODE}."
    )


class _State(NamedTuple):
  phase: str
  step: int
  since: float  # time.monotonic() of the last progress.
  limit: float
  flag: str
  doing: str | None = None


class Watchdog:
  """Ends the process when the current phase makes no progress in time."""

  def __init__(
    self,
    *,
    limits: Limits,
    worker: int = 0,
    heartbeat_dir: str | None = None,
    on_stall: Callable[[Stall], None] | None = None,
    poll_secs: float = 1.0,
  ):
    """Initializes the watchdog; `start` starts watching.

    Args:
      limits: the limits; with `stall_timeout_secs=0` nothing is watched.
      worker: this worker's index, for the stall line and the heartbeat.
      heartbeat_dir: where to keep `worker-<index>.json` current, or None.
      on_stall: called with the `Stall` before the process exits (e.g. to
        record it); it gets a few seconds and must not rely on the main
        thread, which is stuck.
      poll_secs: how often the thread checks.
    """
    limits.validate()
    self._limits = limits
    self._worker = worker
    self._heartbeat = heartbeat_dir and os.path.join(
      heartbeat_dir, f"worker-{worker}.json"
    )
    self._on_stall = [on_stall] if on_stall else []
    self._poll_secs = poll_secs
    self._slowest = {}  # phase -> longest run seen.
    self._stack = []  # Phases in progress (saves nest in start-up).
    self._state = _State(
      progress.STARTUP,
      0,
      time.monotonic(),
      limits.startup_timeout_secs,
      _STARTUP_FLAG,
    )
    self._stop = threading.Event()
    self._thread = None
    self._backstop = None
    self._late = None  # (state, seconds): progress that came past its limit.
    self._marking_thread = threading.get_ident()  # The thread that marks.

  def add_stall_callback(self, callback: Callable[[Stall], None]) -> None:
    """Also calls `callback(stall)` before exiting on a stall."""
    self._on_stall.append(callback)

  def start(self) -> "Watchdog":
    """Starts the watching thread (no-op when off or already started)."""
    if self._limits.enabled and self._thread is None:
      self._state = self._state._replace(since=time.monotonic())
      self._backstop = backstop_lib.Backstop()
      self._backstop.arm(self._state.limit + BACKSTOP_GRACE_SECS)
      self._thread = threading.Thread(
        target=self._watch, daemon=True, name="ctl-watchdog"
      )
      self._thread.start()
    return self

  def stop(self) -> None:
    """Stops watching; the process may then take as long as it likes."""
    if self._thread is not None:
      self._stop.set()
      self._thread.join()
      self._thread = None
      self._backstop.close()
      self._backstop = None
      if self._heartbeat:
        with contextlib.suppress(OSError):
          os.remove(self._heartbeat)

  def __enter__(self) -> "Watchdog":
    return self.start()

  def __exit__(self, *exc_info) -> None:
    self.stop()

  def __call__(self, mark: progress.Mark) -> None:
    """The progress listener: cheap, no I/O (the thread does that)."""
    self._marking_thread = threading.get_ident()
    now = time.monotonic()
    waited = now - self._state.since
    if self._thread is not None and waited > self._state.limit:
      # Too late (e.g. the process was stopped past the limit, then went on
      # before the thread looked): still a stall, as the thread would have
      # seen it had it run.
      self._late = (self._state, waited)
    if mark.started:
      self._stack.append(mark.phase)
      phase = mark.phase
    else:
      if self._stack:
        self._stack.pop()
      slowest = self._slowest.get(mark.phase, 0.0)
      self._slowest[mark.phase] = max(slowest, mark.seconds)
      phase = self._stack[-1] if self._stack else None
    if phase in (None, *_ENCLOSING_PHASES):  # The controller's bookkeeping.
      first_loop_done = progress.FIRST_LOOP in self._slowest
      limit, flag = (
        self._steady(None)
        if first_loop_done
        else (self._limits.startup_timeout_secs, _STARTUP_FLAG)
      )
      phase = f"bookkeeping after {mark.phase}"
    elif phase in _STARTUP_PHASES or (
      phase not in (progress.TRAIN_LOOP, *_BEATING_PHASES)
      and phase not in self._slowest
    ):
      limit, flag = self._limits.startup_timeout_secs, _STARTUP_FLAG
    else:
      limit, flag = self._steady(phase)
    self._state = _State(phase, mark.step, now, limit, flag)

  def beat(self, doing: str) -> None:
    """Progress inside the current phase; `doing` names the next item.

    For phases of many small items of I/O (`_BEATING_PHASES`): each item
    done restarts the phase's clock, and a stall line says what was being
    done (e.g. "reading gs://b/x/1.png"). Cheap: called once per item.
    """
    self._state = self._state._replace(since=time.monotonic(), doing=doing)

  def _steady(self, phase: str | None) -> tuple[float, str]:
    limits = self._limits
    if limits.stall_timeout_secs is not None:
      return limits.stall_timeout_secs, _STALL_FLAG
    slowest = self._slowest.get(phase, 0.0)
    return max(limits.floor_secs, limits.factor * slowest), _STALL_FLAG

  def _watch(self) -> None:
    written = None
    while not self._stop.wait(self._poll_secs):
      if self._late is not None:
        self._stalled(*self._late, late=True)
      state = self._state
      waited = time.monotonic() - state.since
      left = state.limit - waited
      if left < 0:
        self._stalled(state, waited)
      # If this thread cannot run again, the backstop acts instead.
      self._backstop.arm(left + BACKSTOP_GRACE_SECS)
      if self._heartbeat and state is not written:
        self._beat(state, deadline=time.monotonic() + left)
        written = state

  def _beat(
    self, state: _State, *, deadline: float, stalled: bool = False
  ) -> None:
    """Atomically replaces the heartbeat file; errors are not fatal.

    `deadline` is on `time.monotonic()`: Linux's monotonic clock is one for
    the whole host, so the launcher beside this process compares it with its
    own, and a stepped wall clock moves neither.
    """
    record = {
      "pid": os.getpid(),
      "worker": self._worker,
      "phase": state.phase,
      "step": state.step,
      "limit": state.limit,
      "deadline": deadline,
      "stalled": stalled,
    }
    temporary = f"{self._heartbeat}.{os.getpid()}.tmp"
    try:
      with open(temporary, "w") as f:
        json.dump(record, f)
      os.replace(temporary, self._heartbeat)
    except OSError:
      pass

  def _stalled(self, state: _State, waited: float, *, late=False) -> None:
    """Reports the stall and ends the process; never returns. A `late` one
    (progress came past the limit) no longer waits where it was stuck."""
    where = state._asdict()  # The stall's fields, but for the time since.
    del where["since"]
    stuck = not late and sys._current_frames().get(self._marking_thread)  # pylint: disable=protected-access
    stall = Stall(
      worker=self._worker,
      seconds=waited,
      waiting_in=_waiting_in(stuck) if stuck else None,
      **where,
    )
    self._backstop.arm(BACKSTOP_GRACE_SECS)  # Time for the hooks below.
    # os.write and faulthandler take no Python lock the stuck thread may hold.
    os.write(_STDERR, f"{stall.message()}\n".encode())
    faulthandler.dump_traceback(file=_STDERR, all_threads=True)
    if self._heartbeat:
      self._beat(state, deadline=time.monotonic(), stalled=True)
    if self._on_stall:
      hook = threading.Thread(
        target=lambda: [_call_quietly(f, stall) for f in self._on_stall],
        daemon=True,
      )
      hook.start()
      hook.join(timeout=5.0)
    os._exit(STALL_EXIT_CODE)  # pylint: disable=protected-access


def _waiting_in(frame) -> str | None:
  """Where a stuck thread waits: the library that its innermost frame of
  ctl's own code called, and that frame ("gcsfs, called from
  ctl/resilience/lease_store.py:274 (read)"); None when no frame is ctl's.

  The library is the package of the `self` of the first frame called (so a
  gcsfs call through fsspec's synchronous wrapper is gcsfs's), else of that
  frame's module; a call into C code has no frame, and only ctl's is named.
  """
  stack = [f for f, _ in traceback.walk_stack(frame)]  # Innermost first.
  ours = next(
    (i for i, f in enumerate(stack) if _package(f.f_globals) == "ctl"), None
  )
  if ours is None:
    return None
  here = stack[ours]
  code = here.f_code
  path = code.co_filename
  path = path[path.rfind(f"{os.sep}ctl{os.sep}") + 1 :]
  called_from = f"{path}:{here.f_lineno} ({code.co_name})"
  if ours == 0:
    return called_from
  called = stack[ours - 1]
  owner = called.f_locals.get("self")
  library = (
    _package({"__name__": type(owner).__module__}) if owner is not None else ""
  )
  if library in ("", "builtins"):
    library = _package(called.f_globals)
  return f"{library}, called from {called_from}"


def _package(module_globals: dict) -> str:
  """The top-level package of a frame's module ("" when it has no name)."""
  return str(module_globals.get("__name__") or "").split(".", 1)[0]


def _call_quietly(function, *args) -> None:
  try:
    function(*args)
  except Exception:  # pylint: disable=broad-except
    pass
