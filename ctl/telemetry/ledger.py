"""The run ledger: what each start of a job did and when, across restarts.

The chief keeps one small JSON-lines file per start of the job ("attempt")
in `<model_dir>/ledger/`, next to the checkpoints (`<model_dir>/checkpoints`
by default) and `train_summary.json`:

  {"event": "start", "time": ..., "pid": ..., "restart": 1,
   "previous_exit": -9, "previous_exit_time": ..., "jobset_restart": 2,
   "sequence": 3, "flags": ["--train_steps=600", ...]}
  {"event": "phase", "phase": "startup", "t0": ..., "t1": ..., "m0": 5.2,
   "m1": 6.0, "step0": 0, "step": 40, "ok": true}
  {"event": "phase", "phase": "train_loop", ..., "loops": 12, "busy": 3.1}
  {"event": "end", "time": ..., "step": 60, "outcome": "done"}

Events come from the `ctl.telemetry.progress` marks (the ledger is a listener; it adds
no timing of its own) plus `start`, whose time is when the process started
(from /proc, so interpreter and TensorFlow imports count as start-up), and
events other modules add with `record` (e.g. a stall).

Clocks: `time`, `t0` and `t1` are wall-clock times, for people; `m`, `m0`
and `m1` are the same moments in seconds since the attempt began, on the
monotonic clock, which a stepped wall clock (NTP, a VM migration) does not
move: readers (ctl.telemetry.goodput) place events by these. `sequence` numbers the
attempts of a run (1 + the largest in the directory when the attempt first
writes); a reader orders attempts by it, not by their wall-clock starts.
Every attempt has its own file, also two in one process (a notebook).
Beside it, `<attempt>.flags` holds how the attempt was started
(`RunOptions.start_flags`, the trainer's effective flags), one flag a line:
`python -m trainer.task --flagfile=<it>` starts the same way again.

The ledger is an observation, not a result: when its storage refuses a
write (a full disk, a lost permission) it says so once, leaves no temporary
file, and writes nothing more; training goes on.

Why a file per attempt: Cloud Storage objects cannot be appended to, and a
restarted job may run on a fresh machine. Each attempt rewrites only its own
file (atomically where the filesystem allows: a temporary file and a rename),
after every phase, through the same storage routes as the checkpoints: local
paths directly; the gcsfs and FUSE routes through a staging directory
uploaded after each checkpoint save and at the end (a restart on the same
machine uploads what a crash left there); the tf route writes the bucket at
those moments only. A reader
(ctl.telemetry.ledger_reader) concatenates all attempts in sequence order. Consecutive train loops are merged
into one event, so a file grows with checkpoints and evaluations, not with
steps. A file damaged by a crash in the middle of a write loses only its
unreadable lines (a truncated last line is skipped).
"""

from collections.abc import Mapping
import contextlib
import json
import os
import posixpath
import socket
import tempfile
import time

from absl import logging

from ctl import env
from ctl import errors
from ctl import processes
from ctl.io import fencing
from ctl.platform import jobset
from ctl.telemetry import goodput
from ctl.telemetry import ledger_reader
from ctl.telemetry import progress as progress_lib

# Beside each attempt's file: how it was started, a flagfile (`--flagfile`).
FLAGS_SUFFIX = ".flags"
_IMPORTED = time.monotonic()
_attempts_in_this_process = 0


def process_age() -> float:
  """Seconds since this attempt's process started, whatever the wall clock.

  Read from /proc (Linux: the boot clock, to about 10 ms); elsewhere, since
  this module was imported. A warm spare (ctl.launch.spare) was started long before
  its attempt: for it, since it was handed the restart.
  """
  handed = env.attempt_start()  # None too when it cannot be true.
  if handed is not None:
    return max(0.0, time.time() - handed)
  age = processes.age()
  return time.monotonic() - _IMPORTED if age is None else age


def _begin_attempt() -> tuple[float, float, str]:
  """(when this attempt began, the same on the monotonic clock, its file).

  The first attempt of a process began with the process (its imports
  count); a later one (a notebook's second run) begins now. Every event's
  place in the attempt is on the monotonic clock, in seconds since then: a
  step of the wall clock changes none. The file name holds the process and
  the attempt's number in it, so no two attempts share a file.
  """
  global _attempts_in_this_process
  _attempts_in_this_process += 1
  age = process_age() if _attempts_in_this_process == 1 else 0.0
  started = time.time() - age
  name = (
    time.strftime("attempt-%Y%m%dT%H%M%S", time.gmtime(started))
    + f"-{int(started * 1000) % 1000:03d}-{os.getpid()}"
    + f"-{_attempts_in_this_process}"
    + ledger_reader.SUFFIX
  )
  return started, time.monotonic() - age, name


class Unkept:
  """The ledger of a worker that keeps none (every worker but the chief).

  It has the `Ledger`'s interface and records nothing, so a caller holds a
  ledger on every worker and needs no branch for the ones without.
  """

  kept = False

  def __call__(self, mark: progress_lib.Mark) -> None:
    del mark

  def record(self, kind: str, **fields) -> None:
    del kind, fields

  def discard(self) -> None:
    pass

  def attempts(self, *, ending: dict | None = None) -> list[list[dict]]:
    del ending
    return []

  def accounting(self, *, ending: str | None = None, step: int = 0) -> None:
    """None: an unkept ledger knows nothing of where the time went."""
    del ending, step

  def close(self) -> None:
    pass


class Ledger:
  """The chief's record of this attempt; a `ctl.telemetry.progress` listener.

  Never raises into training: a write that fails is logged and retried at the
  next event, except one the storage refuses (a full disk), said once.
  """

  kept = True

  def __init__(
    self,
    *,
    directory: str,
    storage: str = "auto",
    fuse_root: str = "/gcs",
    restart: int = 0,
    start_flags: tuple[str, ...] = (),
    environ: Mapping[str, str] = os.environ,
    fence: fencing.Fence = fencing.OPEN,
  ):
    """Starts the record of this attempt (written from the end of start-up).

    Args:
      directory: the ledger directory, `ledger_dir(model_dir)` (a local
        path, gs:// or a FUSE path).
      storage: the route for gs:// urls (ctl.io.storage.ROUTES).
      fuse_root: where Cloud Storage FUSE mounts buckets.
      restart: how many times a supervisor restarted the job before this
        start (`RunOptions.restarts`).
      start_flags: how this start was set up (`RunOptions.start_flags`):
        kept in the start event and written beside this attempt's file as a
        flagfile (`FLAGS_SUFFIX`).
      environ: the environment, for what ctl.launch says of the previous
        start (ctl.env: CTL_PREVIOUS_EXIT, CTL_PREVIOUS_EXIT_TIME) and, on
        Kubernetes, how often JobSet restarted the whole job
        (CTL_JOBSET_RESTART_ATTEMPT; recorded only when set).
      fence: the lease's fence (ctl.io.fencing): once it fails, nothing more
        is written.
    """
    self._directory = directory
    self._fence = fence
    self._storage = storage
    self._fuse_root = fuse_root
    self._location = None
    self._wrote_flags = False  # This attempt's flagfile (written once).
    self._writing = False  # Until start-up ends: see __call__.
    self._discarded = False
    # The end event the run summary accounted (`accounting(ending=...)`),
    # and how many events there were then.
    self._summarized_end: tuple[dict, int] | None = None
    started, self._origin, self._name = _begin_attempt()
    self._events = [
      {
        "event": "start",
        "time": round(started, 3),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "restart": restart,
        "previous_exit": env.previous_exit(environ),
        "previous_exit_time": env.previous_exit_time(environ),
        **({"flags": list(start_flags)} if start_flags else {}),
      }
    ]
    jobset_restart = jobset.restart_attempt(environ)
    if jobset_restart is not None:
      self._events[0]["jobset_restart"] = jobset_restart

  def __call__(self, mark: progress_lib.Mark) -> None:
    """Records a phase's end (the listener interface)."""
    if mark.started:
      if mark.phase == progress_lib.RUN:  # Imports end here.
        self._events.append(
          {"event": "run", "time": round(mark.time, 3), **self._since(mark)}
        )
      return
    if mark.phase == progress_lib.STARTUP:
      # Nothing is written before start-up ends, and nothing at all when it
      # ends by a user error (a bad checkpoint, an unreachable bucket): such
      # a command must leave the run's files as they were.
      self._discarded = self._discarded or mark.error == "UserError"
      self._writing = not self._discarded
    if mark.phase == progress_lib.RUN:
      self._end(mark)
      return
    event = {
      "event": "phase",
      "phase": mark.phase,
      "t0": round(mark.time - mark.seconds, 3),
      "t1": round(mark.time, 3),
      "step0": mark.step - mark.steps,
      "step": mark.step,
      "ok": mark.ok,
    }
    if mark.monotonic is not None:
      m1 = self._since(mark)["m"]
      event.update(m0=round(m1 - mark.seconds, 3), m1=m1)
    last = self._events[-1]
    if (
      mark.phase == progress_lib.TRAIN_LOOP
      and last.get("phase") == progress_lib.TRAIN_LOOP
      and last["step"] == event["step0"]
    ):
      if "m1" in event:
        last["m1"] = event["m1"]
      last.update(
        t1=event["t1"],
        step=event["step"],
        ok=event["ok"],
        loops=last["loops"] + 1,
        busy=round(last["busy"] + mark.seconds, 3),
      )
    else:
      if mark.phase == progress_lib.TRAIN_LOOP:
        event.update(loops=1, busy=round(mark.seconds, 3))
      self._events.append(event)
    self._write(upload=mark.phase == progress_lib.CHECKPOINT_SAVE)

  def _end(self, mark: progress_lib.Mark) -> None:
    """Records the run's end (its RUN phase ended) and closes the file."""
    outcome = "done" if mark.ok else mark.error or "error"
    summarized, events_then = self._summarized_end or (None, 0)
    if (
      summarized
      and (summarized["outcome"], summarized["step"]) == (outcome, mark.step)
      and events_then == len(self._events)
    ):
      # The run summary accounted this very end and nothing was recorded
      # since: the same moment, so the summary and ctl-report give the
      # same seconds (writing the summary and closing files after it are
      # not counted).
      self._add(dict(summarized))
    else:
      self.record("end", step=mark.step, outcome=outcome)
    self.close()

  def record(self, kind: str, **fields) -> None:
    """Adds an event now, e.g. `record("stall", phase=..., step=...)`.

    Written and uploaded at once, even during start-up: such events often
    come right before the process exits.
    """
    self._add(
      {
        "event": kind,
        "time": round(time.time(), 3),
        "m": round(time.monotonic() - self._origin, 3),
        **fields,
      }
    )

  def _add(self, event: dict) -> None:
    """Appends `event` and writes and uploads the file at once."""
    self._writing = not self._discarded
    self._events.append(event)
    self._write(upload=True)

  def _since(self, mark: progress_lib.Mark) -> dict:
    """{"m": the mark's seconds since the attempt began}, if it has them."""
    if mark.monotonic is None:
      return {}
    return {"m": round(mark.monotonic - self._origin, 3)}

  def discard(self) -> None:
    """Writes nothing from now on (a run that turned out to do nothing)."""
    self._discarded = True
    self._writing = False

  def attempts(self, *, ending: dict | None = None) -> list[list[dict]]:
    """Every attempt's events so far, this one as it is in memory (and
    `ending`, an end event not recorded yet, after its own)."""
    others = [events for _, events in self._others()]
    self._number(others)
    mine = [*self._events, *([ending] if ending else [])]
    return sorted([*others, mine], key=ledger_reader.order)

  def accounting(
    self, *, ending: str | None = None, step: int = 0
  ) -> goodput.Accounting:
    """Where the job's time went so far, until now (on this attempt's
    monotonic clock).

    Args:
      ending: the outcome this attempt is about to end with at `step` (the
        run summary, written just before the end event, says "done" as
        ctl-report will), or None while it runs on ("running").
      step: the step it ends at (with `ending`).
    """
    since_start = time.monotonic() - self._origin
    now = self._events[0]["time"] + since_start
    end = ending and {
      "event": "end",
      "time": round(now, 3),
      "m": round(since_start, 3),
      "step": step,
      "outcome": ending,
    }
    if end:  # The end event, when it comes as said and nothing before it.
      self._summarized_end = (end, len(self._events))
    return goodput.account(self.attempts(ending=end), now=now)

  def close(self) -> None:
    """Uploads the file a last time and releases the staging directory."""
    self._write(upload=True)
    if self._location is not None:
      try:
        self._location.close()  # Releases the staging directory whatever.
      except fencing.LeaseLost:
        pass  # A taken-over writer records nothing more; the run says why.
      except Exception:  # pylint: disable=broad-except
        logging.exception("Could not upload the run ledger.")
      self._location = None

  def _number(self, others: list[list[dict]] | None = None) -> None:
    """Numbers this attempt after those in the directory (`sequence`).

    Attempts are read back in this order, not by their wall clock start
    times, which a stepped clock can put in any order. One writer holds the
    run directory (ctl.resilience.lease), so no two attempts take the same number.
    """
    if "sequence" in self._events[0]:
      return
    if others is None:
      try:
        others = [events for _, events in self._others()]
      except Exception:  # pylint: disable=broad-except
        logging.exception(
          "Could not read the run ledger in %s.", self._directory
        )
        return
    self._events[0]["sequence"] = 1 + max(
      (events[0].get("sequence", 0) for events in others), default=0
    )

  def _others(self) -> list[tuple[str, list[dict]]]:
    return [
      (name, events)
      for name, events in ledger_reader.read_files(
        self._directory, storage_route=self._storage, fuse_root=self._fuse_root
      )
      if name != self._name
    ]

  def _write(self, *, upload: bool) -> None:
    if not self._writing:
      return
    self._number()
    text = "".join(json.dumps(event) + "\n" for event in self._events)
    try:
      if self._location is None:
        # Imported here: ctl.io.storage loads TensorFlow; readers need not.
        from ctl.io import storage  # pylint: disable=g-import-not-at-top

        self._location = storage.open_location(
          self._directory,
          storage=self._storage,
          fuse_root=self._fuse_root,
          fence=self._fence,
        )
      path = posixpath.join(self._location.local_path, self._name)
      writes = upload or "://" not in path  # The tf route writes the bucket.
      if writes and not self._location.mirrored:  # Mirrors check their own.
        self._fence.check("the run ledger")
      if writes:
        if self._events[0].get("flags") and not self._wrote_flags:
          flags = "".join(f + "\n" for f in self._events[0]["flags"])
          _write_file(
            path.removesuffix(ledger_reader.SUFFIX) + FLAGS_SUFFIX, flags
          )
          self._wrote_flags = True
        _write_file(path, text)
      if upload:
        self._location.publish()
    except fencing.LeaseLost:
      self.discard()  # A taken-over writer records nothing more.
    except Exception as e:  # pylint: disable=broad-except
      reason = errors.refused_write(e)
      if reason is None:
        logging.exception(
          "Could not write the run ledger in %s.", self._directory
        )
        return
      # An observation, not a result: said once, and training goes on.
      logging.warning(
        "Cannot write the run ledger in %s: %s; training goes on without "
        "it (this start's goodput is not recorded).",
        self._directory,
        reason,
      )
      self.discard()


def _write_file(path: str, text: str) -> None:
  """Replaces `path` with `text`: atomically on local disks."""
  if "://" in path:  # TensorFlow's own filesystem (the tf route).
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    with tf.io.gfile.GFile(path, "w") as f:
      f.write(text)
    return
  directory = os.path.dirname(path)
  os.makedirs(directory, exist_ok=True)
  temporary = tempfile.NamedTemporaryFile(
    "w", dir=directory, suffix=".tmp", delete=False
  )
  try:
    with temporary:
      temporary.write(text)
    os.replace(temporary.name, path)
  except BaseException:
    with contextlib.suppress(OSError):  # A full disk leaves no .tmp file.
      os.remove(temporary.name)
    raise
