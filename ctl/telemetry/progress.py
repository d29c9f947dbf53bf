"""Where a run is: the phase it is in and the step it has reached.

The controller marks each phase of a run (start-up and restore, the first
train loop with its tracing, later train loops, evaluation, checkpoint save
and upload, export) once, here; every listener receives the same marks. The
stall watchdog (a phase that runs past its limit) and the run ledger (what
each phase cost) are listeners, so the places that mark progress exist once
and neither touches the compiled step.

Phases nest in four cases: `run` spans the whole `ctl.run` call and
encloses every other phase (its end mark says how the run ended); `restore`
(reading the newest checkpoint) is part of start-up; the first
save of a new run is part of start-up;
and a checkpoint upload (only for directories mirrored
to Cloud Storage) runs inside the save that wrote the checkpoint, or, with
async saves, inside the next save or the end of the run; its seconds are
part of the enclosing phase's.

A listener is a plain callable `listener(mark)`. It is called on the thread
that marks the phase, so it must be quick and must not raise; one that does
is a bug, not a reason to stop training, so the error is logged and dropped.

`EventsFile` is the listener tests and benchmarks follow a run by: with
`CTL_EVENTS=path` set, each mark becomes one JSON line appended to `path`
(several processes may share it), so they never read log wording. The restore
phase's end mark carries the restored step (0: a fresh start).
"""

from collections.abc import Callable, Iterator, Mapping
import contextlib
import dataclasses
import json
import os
import time

from absl import logging

from ctl import env

# The phases a run goes through, in the order a run meets them.
# Before `ctl.run`: the trainer lists and checks its data files, marking each
# directory listed and file read (Progress.beat) so that a stuck read is a
# stall of the steady limit that names the file.
DATA_LISTING = "data_listing"
RUN = "run"  # The whole `ctl.run` call; encloses all the others.
STARTUP = "startup"  # From the start of `ctl.run` until the restore is done.
RESTORE = "restore"  # Restoring the newest checkpoint, inside start-up.
FIRST_LOOP = "first_loop"  # The first train-loop call: includes tracing.
TRAIN_LOOP = "train_loop"  # Every later train-loop call.
EVALUATION = "evaluation"
LOOP_ACTIONS = "loop_actions"  # The user's loop actions after a loop.
CHECKPOINT_SAVE = "checkpoint_save"  # Writing the checkpoint's files.
# Between the bucket's saves: a save to the node's local tier only.
LOCAL_CHECKPOINT_SAVE = "local_checkpoint_save"
CHECKPOINT_UPLOAD = "checkpoint_upload"  # Publishing them (gcsfs / FUSE).
EXPORT = "export"  # The SavedModel at the end.
PHASES = (
  DATA_LISTING,
  RUN,
  STARTUP,
  RESTORE,
  FIRST_LOOP,
  TRAIN_LOOP,
  EVALUATION,
  LOOP_ACTIONS,
  CHECKPOINT_SAVE,
  LOCAL_CHECKPOINT_SAVE,
  CHECKPOINT_UPLOAD,
  EXPORT,
)


@dataclasses.dataclass(frozen=True)
class Mark:
  """A phase starting (`seconds` is None) or ending (`seconds` is set).

  Attributes:
    phase: one of PHASES.
    step: the global step when the phase started or ended.
    time: wall-clock time of the mark (`time.time()`): for display and for
      ordering marks across processes, never for durations.
    seconds: how long the phase took, on the monotonic clock (a stepped wall
      clock does not change it); None on the mark that starts it.
    steps: training steps the phase ran (train loops; 0 otherwise).
    ok: False when the phase ended by an exception.
    error: the name of that exception's type (e.g. "Preempted"), else None.
    monotonic: this process's `time.monotonic()` at the mark, which places
      it within the process whatever the wall clock does (None: a mark made
      by hand, placed by `time` alone).
  """

  phase: str
  step: int
  time: float
  seconds: float | None = None
  steps: int = 0
  ok: bool = True
  error: str | None = None
  monotonic: float | None = None

  @property
  def started(self) -> bool:
    return self.seconds is None


Listener = Callable[[Mark], None]


class Progress:
  """Marks phases and hands each mark to every listener."""

  def __init__(
    self,
    *,
    current_step: Callable[[], int],
    listeners: tuple[Listener, ...] = (),
  ):
    """Initializes the tracker.

    Args:
      current_step: returns the global step now (read at each mark).
      listeners: called with every `Mark`, in order.
    """
    self._current_step = current_step
    self._listeners = list(listeners)

  def add_listener(self, listener: Listener) -> None:
    self._listeners.append(listener)

  @contextlib.contextmanager
  def phase(self, name: str) -> Iterator[None]:
    """Marks the start of phase `name` now and its end when the block exits."""
    if name not in PHASES:
      raise ValueError(f"unknown phase {name!r}; expected one of {PHASES}.")
    start_step = self._current_step()
    started, clock = time.time(), time.monotonic()
    self._emit(Mark(phase=name, step=start_step, time=started, monotonic=clock))
    ok, error = False, None
    try:
      yield
      ok = True
    except BaseException as e:
      error = type(e).__name__
      raise
    finally:
      ended, now = time.time(), time.monotonic()
      end_step = self._current_step()
      self._emit(
        Mark(
          phase=name,
          step=end_step,
          time=ended,
          seconds=now - clock,
          steps=end_step - start_step,
          ok=ok,
          error=error,
          monotonic=now,
        )
      )

  def _emit(self, mark: Mark) -> None:
    for listener in self._listeners:
      try:
        listener(mark)
      except Exception:  # pylint: disable=broad-except
        logging.exception("Progress listener %r failed on %s.", listener, mark)


class EventsFile:
  """A listener that appends each mark to a file as one JSON line.

  Each line holds the mark's fields and who marked it: `worker`, `attempt`,
  `pid`, and `monotonic` (this process's `time.monotonic()` at the mark) next
  to the mark's wall `time`. Lines are written with one `os.write` on a file
  opened for appending, so workers can share one file and a reader sees each
  line whole as soon as it is marked.
  """

  def __init__(self, *, path: str, worker: int, attempt: int):
    """Opens `path` for appending (created if missing).

    Args:
      path: the events file.
      worker: this worker's number (the chief is 0).
      attempt: how many times the job was restarted before this start.
    """
    self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    self._who = {"worker": worker, "attempt": attempt, "pid": os.getpid()}

  def __call__(self, mark: Mark) -> None:
    line = json.dumps(
      {
        **dataclasses.asdict(mark),
        **self._who,
        "monotonic": time.monotonic()
        if mark.monotonic is None
        else mark.monotonic,
      }
    )
    os.write(self._fd, (line + "\n").encode())


def events_from_environ(
  environ: Mapping[str, str] = os.environ, *, worker: int, attempt: int
) -> tuple[Listener, ...]:
  """An `EventsFile` listener when `CTL_EVENTS` names a file, else none."""
  path = env.events_path(environ)
  if not path:
    return ()
  return (EventsFile(path=path, worker=worker, attempt=attempt),)
