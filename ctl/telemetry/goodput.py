"""Goodput: where a job's wall time went, from its run ledger (ctl.telemetry.ledger).

The job's wall time runs from the first attempt's process start to the last
attempt's end, less the time between a run that finished and a later command
that continues it (a re-run with a larger --train_steps is not a restart).
Every moment of it falls in exactly one category, so the categories add up
to the total:

  goodput             train loops whose steps count toward the final model
  startup             process start (imports included) to the end of the
                      restore, less the restore itself
  restore             reading the newest checkpoint (on the gcsfs and FUSE
                      routes its download is part of start-up)
  first_loop_tracing  the first loop of an attempt minus its steps at the
                      attempt's median step time (tracing, compilation)
  checkpoint_save     writing checkpoints (without their upload), to the
                      bucket and to the local tier alike
  checkpoint_upload   copying them to Cloud Storage (gcsfs, FUSE)
  evaluation          evaluations during and at the end of training
  loop_actions        the user's loop actions after each train loop
  export              the final SavedModel
  progress_lost       a failed attempt's time after it last stood at the
                      step the next attempt resumed from: work redone
                      later (the steps are `lost_steps`), and a loop that
                      waited for a dead peer until its collective failed
  restart_gap         no process running: from a failure to the next start
  other               bookkeeping outside any phase (logging, summaries)

Input waits are not split out: the compiled loop reads its input inside the
same `tf.function` call, so its time is part of the loop's.

Clocks: within an attempt, every event is placed by the attempt's start plus
its seconds on the monotonic clock (the ledger's `m`, `m0`, `m1`), so a step
of the wall clock during a run changes no duration. Wall time only places the
attempts: one that begins before the one before it ended (a clock set back
between them, or two machines' clocks that disagree) is counted as if it
followed at once, and the accounting says so in its notes.
"""

from collections.abc import Sequence
import dataclasses
import math
import signal
import statistics

from ctl.errors import STALL_EXIT_CODE

GOODPUT = "goodput"
STARTUP = "startup"
RESTORE = "restore"
TRACING = "first_loop_tracing"
CHECKPOINT_SAVE = "checkpoint_save"
CHECKPOINT_UPLOAD = "checkpoint_upload"
EVALUATION = "evaluation"
ACTIONS = "loop_actions"
EXPORT = "export"
LOST = "progress_lost"
RESTART_GAP = "restart_gap"
OTHER = "other"
CATEGORIES = (
  GOODPUT,
  STARTUP,
  RESTORE,
  TRACING,
  CHECKPOINT_SAVE,
  CHECKPOINT_UPLOAD,
  EVALUATION,
  ACTIONS,
  EXPORT,
  LOST,
  RESTART_GAP,
  OTHER,
)

# Our badput categories in the taxonomy of Google's ml-goodput-measurement
# (`BadputType` in its src/goodput_utils.py), which Google Cloud's goodput
# metrics use, so that ctl-report reads like them. Two of its types are not
# apart here: TPU_INITIALIZATION (device set-up happens in our start-up, so in
# TRAINING_PREP) and DATA_LOADING_SYNC (the compiled loop reads its input
# inside the step, so in goodput).
BADPUT_TYPES = {
  STARTUP: "TRAINING_PREP",
  TRACING: "PROGRAM_STARTUP",
  CHECKPOINT_SAVE: "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
  CHECKPOINT_UPLOAD: "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
  RESTORE: "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
  LOST: "WASTED_PROGRESS_FROM_DISRUPTION",
  RESTART_GAP: "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
  EVALUATION: "CUSTOM_BADPUT_EVENTS",
  ACTIONS: "CUSTOM_BADPUT_EVENTS",
  EXPORT: "CUSTOM_BADPUT_EVENTS",
  OTHER: "OTHER",
}


def badput(seconds: dict[str, float]) -> dict[str, float]:
  """Seconds per `BadputType` name, in that enum's order.

  Args:
    seconds: Seconds per category, `Accounting.seconds`.

  Returns:
    The badput of each type that ours map onto; with `seconds[GOODPUT]`
    they add up to the total.
  """
  result = {}
  for category, badput_type in BADPUT_TYPES.items():
    result[badput_type] = result.get(badput_type, 0.0) + seconds[category]
  return result


# Phase -> (category, priority): a nested phase (a restore inside start-up,
# a save inside the restore of a new run, an upload inside a save) outranks
# the one around it.
_PHASES = {
  "startup": (STARTUP, 1),
  "first_loop": (GOODPUT, 1),
  "train_loop": (GOODPUT, 1),
  "evaluation": (EVALUATION, 1),
  "loop_actions": (ACTIONS, 1),
  "export": (EXPORT, 1),
  "restore": (RESTORE, 2),
  "checkpoint_save": (CHECKPOINT_SAVE, 3),
  "local_checkpoint_save": (CHECKPOINT_SAVE, 3),
  "checkpoint_upload": (CHECKPOINT_UPLOAD, 4),
}
_CLEAN_ENDS = ("done", "Preempted")


@dataclasses.dataclass(frozen=True)
class Segment:
  """A stretch of wall time in one category (for the timeline)."""

  attempt: int
  category: str
  start: float
  end: float


@dataclasses.dataclass(frozen=True)
class Attempt:
  """One start of the job.

  Attributes:
    index: 0 for the first start.
    start: process start time (seconds since the epoch).
    end: when it ended: its end event, else when the launcher saw it exit,
      else its last event.
    outcome: "done", "preempted (saved)", "failed: <error>" (for a peer
      lost, "failed: lost contact with worker 1 (host-1:23500)"), "killed by
      SIGKILL", "stalled" (with the watchdog's record: "stalled in
      checkpoint_save at step 150, waiting in gcsfs, called from …"),
      "failed (unknown cause)", or "running" for the
      last attempt with no end yet.
    failed: whether it ended without finishing or saving on request.
    restored_step: the step it restored (None: died before restoring).
    last_step: the last step it recorded.
    lost_steps: steps it trained after the checkpoint the next attempt
      resumed from.
    restored_from: where its restore came from and how long it took, e.g.
      "local tier, 0.21 s" (a `checkpoint_restore` event), or "".
    imported: seconds from its start to the end of its imports (its `run`
      event; for a warm spare, from the hand-over), or None.
  """

  index: int
  start: float
  end: float
  outcome: str
  failed: bool
  restored_step: int | None
  last_step: int
  lost_steps: int
  restored_from: str = ""
  imported: float | None = None


@dataclasses.dataclass(frozen=True)
class Accounting:
  """Where the wall time of a job went.

  Attributes:
    total_seconds: first process start to last end, less idle time after
      a finished run.
    seconds: seconds per category (CATEGORIES); they sum to total_seconds.
    goodput_percent: 100 x seconds[GOODPUT] / total_seconds.
    final_step: the last step recorded.
    failures: attempts that failed (preemptions with a save are not).
    lost_steps: steps trained and then redone, over all attempts.
    checkpoint_saves: the bucket's checkpoint saves recorded (local-tier
      saves between them are not counted here).
    attempts: per attempt.
    segments: the timeline, in time order.
    notes: what could not be placed on the wall clock, one sentence each.
  """

  total_seconds: float
  seconds: dict[str, float]
  goodput_percent: float
  final_step: int
  failures: int
  lost_steps: int
  checkpoint_saves: int
  attempts: tuple[Attempt, ...]
  segments: tuple[Segment, ...]
  notes: tuple[str, ...] = ()

  def summary(self) -> dict:
    """A JSON-ready digest (no timeline) for train_summary.json."""
    return {
      **({"notes": list(self.notes)} if self.notes else {}),
      "total_seconds": round(self.total_seconds, 3),
      "goodput_percent": round(self.goodput_percent, 2),
      "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
      "failures": self.failures,
      "lost_steps": self.lost_steps,
      "attempts": [
        {
          "outcome": a.outcome,
          "restored_step": a.restored_step,
          "last_step": a.last_step,
          "lost_steps": a.lost_steps,
          "seconds": round(a.end - a.start, 3),
          **({"restored_from": a.restored_from} if a.restored_from else {}),
        }
        for a in self.attempts
      ],
    }


def account(
  attempts: Sequence[Sequence[dict]], *, now: float | None = None
) -> Accounting:
  """Splits a job's wall time into CATEGORIES.

  Args:
    attempts: each attempt's ledger events, in start order
      (ctl.telemetry.ledger_reader.read).
    now: for the process doing the accounting while it still runs: its
      attempt (the last) ends now rather than at its last event.

  Returns:
    The accounting.

  Raises:
    ValueError: no attempts.
  """
  if not attempts:
    raise ValueError("the ledger has no attempts.")
  attempts, notes, now = _placed(attempts, now)
  step_seconds = _median_step_seconds(attempts)
  infos = [
    _attempt(i, events, attempts[i + 1 :], now)
    for i, events in enumerate(attempts)
  ]
  segments = []
  floor = infos[0].start
  for info, events in zip(infos, attempts):
    start = max(info.start, floor)
    if start > floor and infos[info.index - 1].outcome != "done":
      segments.append(Segment(info.index, RESTART_GAP, floor, start))
    end = max(info.end, start)
    cut = (
      None
      if info.index == len(infos) - 1
      else _resume_time(events, info, attempts[info.index + 1 :])
    )
    segments += _paint(info.index, events, start, end, cut, step_seconds)
    floor = end
  seconds = dict.fromkeys(CATEGORIES, 0.0)
  for segment in segments:
    seconds[segment.category] += segment.end - segment.start
  total = sum(seconds.values())
  return Accounting(
    total_seconds=total,
    seconds=seconds,
    goodput_percent=100.0 * seconds[GOODPUT] / total if total > 0 else 0.0,
    final_step=infos[-1].last_step,
    failures=sum(info.failed for info in infos),
    lost_steps=sum(info.lost_steps for info in infos),
    checkpoint_saves=sum(
      1
      for events in attempts
      for e in _phases(events)
      if e["phase"] == "checkpoint_save"
    ),
    attempts=tuple(infos),
    segments=tuple(segments),
    notes=tuple(notes),
  )


def _on_its_own_clock(events: Sequence[dict], shift: float) -> list[dict]:
  """The attempt's events placed by its start (moved by `shift`) plus their
  monotonic seconds since it (`m`, `m0`, `m1`; older ledgers have none)."""
  start = events[0]["time"] + shift
  placed = [{**events[0], "time": start}]
  for event in events[1:]:
    event = dict(event)
    if "m" in event:
      event["time"] = start + event["m"]
    elif "time" in event:
      event["time"] += shift
    if "m0" in event and "m1" in event:
      event["t0"], event["t1"] = start + event["m0"], start + event["m1"]
    elif "t0" in event:
      event["t0"], event["t1"] = event["t0"] + shift, event["t1"] + shift
    placed.append(event)
  return placed


def _placed(
  attempts: Sequence[Sequence[dict]], now: float | None
) -> tuple[list[list[dict]], list[str], float | None]:
  """The attempts on one timeline, a note for each moved one, and `now`
  moved with the last.

  An attempt that begins before the one before it ended (by their wall
  clocks) cannot be placed: it is moved to begin where that one ended.
  """
  since_start = None if now is None else now - attempts[-1][0]["time"]
  placed, notes, floor = [], [], None
  for index, events in enumerate(attempts):
    shift = 0.0
    if floor is not None and events[0]["time"] < floor:
      shift = floor - events[0]["time"]
      if shift > 1.0:  # /proc gives process starts to about 10 ms.
        notes.append(
          f"Start {index + 1} began {shift:.1f} s before start {index} "
          "ended by the wall clock (a clock stepped back, or clocks that "
          "disagree): counted as if it followed at once."
        )
    events = _on_its_own_clock(events, shift)
    if any(
      e.get(field, math.inf) < events[0]["time"]
      for e in events[1:]
      for field in ("time", "t0", "t1")
    ):
      notes.append(
        f"Start {index + 1} has events before its own start (a wall clock "
        "stepped back during it, in a ledger without monotonic times): its "
        "seconds are a lower bound."
      )
    placed.append(events)
    floor = _last_time(events)
  if since_start is not None:
    now = placed[-1][0]["time"] + since_start
  return placed, notes, now


def _last_time(events: Sequence[dict]) -> float:
  start = events[0]["time"]
  return max([start] + [e.get("t1", e.get("time", start)) for e in events[1:]])


def _phases(events: Sequence[dict]) -> list[dict]:
  return [e for e in events if e["event"] == "phase"]


def _median_step_seconds(attempts: Sequence[Sequence[dict]]) -> float | None:
  rates = [
    e["busy"] / (e["step"] - e["step0"])
    for events in attempts
    for e in _phases(events)
    if e["phase"] == "train_loop" and e["step"] > e["step0"]
  ]
  return statistics.median(rates) if rates else None


def _attempt(
  index: int,
  events: Sequence[dict],
  later: Sequence[Sequence[dict]],
  now: float | None,
) -> Attempt:
  """What one attempt did and how it ended."""
  start = events[0]["time"]
  last_time = _last_time(events)
  phases = _phases(events)
  restored = _restored_step(events)
  last_step = max([e["step"] for e in phases] + [restored or 0])
  end_event = next((e for e in events if e["event"] == "end"), None)
  following = later[0][0] if later else None
  if end_event:
    # At least its last event: an older ledger's wall clock may run back.
    end, outcome = max(end_event["time"], last_time), end_event["outcome"]
    outcome = {"done": "done", "Preempted": "preempted (saved)"}.get(
      outcome, f"failed: {_peer_lost(events) or outcome}"
    )
  else:
    # The launcher's clock: believed only between this end and the next.
    exit_time = following and following.get("previous_exit_time")
    end = last_time
    if exit_time and last_time <= exit_time <= following["time"]:
      end = exit_time
    if not later and now is not None:
      end = max(end, now)
    outcome = _unrecorded_end(events, following, last=not later)
  failed = bool(later) and not (
    end_event and end_event["outcome"] in _CLEAN_ENDS
  )
  resume = _resume_step(events, later)
  lost = max(0, last_step - resume) if later and resume is not None else 0
  return Attempt(
    index=index,
    start=start,
    end=end,
    outcome=outcome,
    failed=failed,
    restored_step=restored,
    last_step=last_step,
    lost_steps=lost,
    restored_from=_restored_from(events),
    imported=next((e.get("m") for e in events if e["event"] == "run"), None),
  )


def _restored_from(events: Sequence[dict]) -> str:
  """Where the attempt restored from (its `checkpoint_restore` event), or "".

  Returns:
    "TIER tier, S s", e.g. "local tier, 0.21 s".
  """
  for event in events:
    if event["event"] == "checkpoint_restore":
      return f"{event.get('tier')} tier, {event.get('seconds', 0):.2f} s"
  return ""


def named_fault(events: Sequence[dict]) -> str | None:
  """The fault an attempt's own ledger names, or None: whom it lost
  contact with (its `peer_lost` event, ctl.train.controller) or where it
  stalled (its `stall` event, ctl.resilience.watchdog)."""
  return _peer_lost(events) or _stalled(events)


def _peer_lost(events: Sequence[dict]) -> str | None:
  """Whom the attempt lost contact with (its `peer_lost` event), or None."""
  return next((e["peer"] for e in events if e["event"] == "peer_lost"), None)


def _stalled(events: Sequence[dict]) -> str | None:
  """Where the attempt stalled (its watchdog's `stall` event), or None:
  "stalled in checkpoint_save at step 150, waiting in gcsfs, called from
  ctl/io/mirror.py:362 (object_generation)"."""
  stall = next((e for e in events if e["event"] == "stall"), None)
  if stall is None:
    return None
  waiting = stall.get("waiting_in")
  return f"stalled in {stall['phase']} at step {stall['step']}" + (
    f", waiting in {waiting}" if waiting else ""
  )


def _unrecorded_end(events, following: dict | None, *, last: bool) -> str:
  stalled = _stalled(events)
  if stalled:
    return stalled
  code = following and following.get("previous_exit")
  if code == STALL_EXIT_CODE:  # The watchdog's record did not make it.
    return "stalled"
  if code:
    if code < 0:
      try:
        return f"killed by {signal.Signals(-code).name}"
      except ValueError:
        return f"killed by signal {-code}"
    return f"exited with code {code}"
  return "running" if last else "failed (unknown cause)"


def _restored_step(events: Sequence[dict]) -> int | None:
  return next(
    (e["step"] for e in _phases(events) if e["phase"] == "startup"), None
  )


def _resume_step(events, later) -> int | None:
  """The step the next attempt that got that far restored."""
  for other in later:
    step = _restored_step(other)
    if step is not None:
      return step
  saves = [
    e["step"]
    for e in _phases(events)
    if e["phase"] == "checkpoint_save" and e["ok"]
  ]
  return max(saves) if saves else _restored_step(events)


def _resume_time(events, info: Attempt, later) -> float:
  """When this attempt last stood at the step the job later resumed from:
  the end of its last phase at or before that step that did not fail (a
  failed save kept nothing; a loop that failed waiting for a dead peer, its
  step still the resumed one, is time lost to the fault, not training)."""
  resume = _resume_step(events, later)
  times = [
    e["t1"]
    for e in _phases(events)
    if resume is not None and e["step"] <= resume and e.get("ok", True)
  ]
  return max(times, default=info.start)


def _paint(
  index: int,
  events: Sequence[dict],
  start: float,
  end: float,
  cut: float | None,
  step_seconds: float | None,
) -> list[Segment]:
  """The attempt's timeline: innermost phase wins; after `cut`, all is lost."""
  spans = [(start, end, OTHER, 0)]  # (start, end, category, priority)
  for e in _phases(events):
    category, priority = _PHASES.get(e["phase"], (OTHER, 1))
    t0 = start if e["phase"] == "startup" else e["t0"]
    if e["phase"] == "first_loop":
      steps = e["step"] - e["step0"]
      tracing = (
        e["t1"] - e["t0"]
        if step_seconds is None
        else max(0.0, e["t1"] - e["t0"] - steps * step_seconds)
      )
      spans.append((t0, t0 + tracing, TRACING, priority))
      t0 += tracing
    spans.append((t0, e["t1"], category, priority))
  bounds = sorted(
    {t for s in spans for t in s[:2] if start <= t <= end}
    | {start, end}
    | ({cut} if cut and start < cut < end else set())
  )
  painted = []
  for a, b in zip(bounds, bounds[1:]):
    if cut is not None and a >= cut:
      category = LOST
    else:
      active = [s for s in spans if s[0] <= a and b <= s[1]]
      category = max(active, key=lambda s: (s[3], s[0]))[2]
    if painted and painted[-1].category == category:
      painted[-1] = dataclasses.replace(painted[-1], end=b)
    else:
      painted.append(Segment(index, category, a, b))
  return painted
