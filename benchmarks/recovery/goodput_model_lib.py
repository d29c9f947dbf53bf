"""The goodput model (ctl.telemetry.goodput_model) against killed runs, and
evaluated at a fault every 5 and every 30 minutes.

The checkpoint-tiers section kills each way of coming back a few times
(`tiers_lib.GOODPUT_MODES`). From each run's ledger this module takes what
the model needs: the seconds from a kill to the resumed step (the restart
gap, start-up, restore and first-loop tracing of every later start, per
kill), the seconds a save blocks the steps, the step time and the time
between kills. The model, fed those, predicts the goodput of the run's
fault window (the run less its first start-up and its final evaluation and
export, which a run without faults pays too); the measured goodput of that
window checks it. Then the model answers for a kill every 5 and every 30
minutes, with the save interval Young/Daly's for each way: the bucket's
save (blocking) without the local tier, the local tier's save with it.
"""

import os

from benchmarks.harness import report as report_lib
from benchmarks.harness import stats
from benchmarks.recovery import restart_lib
from ctl.telemetry import goodput
from ctl.telemetry import goodput_model
from ctl.telemetry import ledger_reader
from ctl.telemetry import progress
from ctl.telemetry import restart_phases as restart_phases_lib
from ctl.testing import events as events_lib

# The fault intervals the model is evaluated at (minutes).
MINUTES = (5, 30)
# Costs of a start that follow a failure (the first start's are not a
# fault's: a run without faults pays them too).
_RESTART = (goodput.STARTUP, goodput.RESTORE, goodput.TRACING)


def measured(
  model_dir: str, *, restarts: list[float], save_every_steps: int
) -> dict:
  """What a killed run's ledger says of its faults; the model's inputs.

  Args:
    model_dir: the run's --model_dir.
    restarts: per kill, the seconds to the end of the chief's first
      resumed loop and that loop's steps (`seconds_to_resume`).
    save_every_steps: the steps between the saves it restores from (the
      local tier's when on, else the bucket's).
  """
  kills = len(restarts)
  accounting = _accounting(model_dir)
  seconds = accounting.seconds
  window = (
    accounting.total_seconds
    - sum(_spent(accounting, range(1), category) for category in _RESTART)
    - seconds[goodput.EVALUATION]
    - seconds[goodput.EXPORT]
  )
  saves = max(1, accounting.checkpoint_saves + _local_saves(model_dir))
  step = seconds[goodput.GOODPUT] / max(1, accounting.final_step)
  save = (
    seconds[goodput.CHECKPOINT_SAVE] + seconds[goodput.CHECKPOINT_UPLOAD]
  ) / saves
  return {
    # The resumed loop's own steps train (goodput): they come off.
    "restart_seconds": sum(s - n * step for s, n in restarts) / kills,
    "save_seconds": save,
    "step_seconds": step,
    # Wall time from one save's start to the next: its steps and itself.
    "save_every_seconds": save_every_steps * step + save,
    "fault_every_seconds": window / kills,
    "window_goodput_percent": 100.0 * seconds[goodput.GOODPUT] / window,
    # What each kill cost: the window's time that was not goodput, per kill
    # (its bookkeeping too: a chief blocked in a collective on its dead peer
    # is counted there).
    "kill_cost_seconds": (window - seconds[goodput.GOODPUT]) / kills,
    # Bookkeeping outside any phase, which the model leaves out.
    "other_percent": 100.0 * seconds[goodput.OTHER] / window,
  }


def seconds_to_resume(
  events: str, killed: list[float]
) -> list[tuple[float, int]]:
  """Per kill, the seconds until the chief's next first loop ended (the
  whole restart, from the kill to a resumed step: detection, going down,
  the gap, start-up, restore, tracing, and that loop's steps), on the
  events' monotonic clock, with that loop's steps.

  Args:
    events: the run's progress events file (`CTL_EVENTS`).
    killed: when each kill was sent (`time.monotonic()`).
  """
  ends = sorted(
    (e["monotonic"], e["steps"])
    for e in events_lib.read_events(events)
    if e["worker"] == 0
    and e["phase"] == progress.FIRST_LOOP
    and e["seconds"] is not None
  )
  return [
    next((end - kill, steps) for end, steps in ends if end > kill)
    for kill in killed
  ]


def restart_parts(model_dir: str) -> dict:
  """Seconds of the starts after the first, by category, with the gaps
  between a failure and the next start: {category: seconds}."""
  accounting = _accounting(model_dir)
  later = range(1, len(accounting.attempts))
  return {
    goodput.RESTART_GAP: accounting.seconds[goodput.RESTART_GAP],
    **{c: _spent(accounting, later, c) for c in _RESTART},
  }


def _accounting(model_dir: str) -> goodput.Accounting:
  return goodput.account(
    ledger_reader.read(ledger_reader.ledger_dir(model_dir))
  )


def _spent(accounting, attempts: range, category: str) -> float:
  return sum(
    s.end - s.start
    for s in accounting.segments
    if s.attempt in attempts and s.category == category
  )


def _local_saves(model_dir: str) -> int:
  return sum(
    1
    for events in ledger_reader.read(ledger_reader.ledger_dir(model_dir))
    for e in events
    if e.get("phase") == "local_checkpoint_save"
  )


def predicted(costs: dict) -> float:
  """The model's goodput (%) for a measured run's own fault window."""
  return goodput_model.expected_goodput(
    fault_every_seconds=costs["fault_every_seconds"],
    restart_seconds=costs["restart_seconds"],
    save_seconds=costs["save_seconds"],
    save_every_seconds=costs["save_every_seconds"],
  ).goodput_percent


def predicted_kill_cost(costs: dict) -> float:
  """The model's seconds per kill in that window (all it does not count as
  goodput: restart, half a save interval, the saves)."""
  return costs["fault_every_seconds"] * (1 - predicted(costs) / 100)


def at_intervals(name: str, *, restart_seconds: float, save_seconds: float):
  """Rows: the model at a fault every MINUTES, Young/Daly save interval."""
  rows = []
  for minutes in MINUTES:
    expected = goodput_model.expected_goodput(
      fault_every_seconds=60.0 * minutes,
      restart_seconds=restart_seconds,
      save_seconds=save_seconds,
    )
    rows.append(
      {
        "name": f"{name}, a kill every {minutes} min",
        "goodput_percent": expected.goodput_percent,
        "restart_seconds": restart_seconds,
        "lost_seconds": expected.lost_seconds,
        "saving_seconds": expected.save_seconds,
        "save_every_seconds": expected.save_every_seconds,
      }
    )
  return rows


def agreement(name: str, measured_seconds: float, model_seconds: float):
  """A verdict: the model's cost of a kill within 20% of the measured one
  (ratio of the smaller to the larger >= 0.8).

  The cost, not the goodput: with kills a few seconds apart, as the bench
  can afford, the goodput left is a small difference of two large numbers
  (7% against 12% from half a second per kill), while the cost of a kill is
  what the model is made of and what decides the goodput at any interval.
  """
  low, high = sorted((measured_seconds, model_seconds))
  value = low / high if high > 0 else 1.0
  return stats.verdict(
    stats.summary(f"{name}: model / measured", [value]),
    threshold=0.8,
    name=f"{name}: the model predicts the seconds a kill costs within 20%",
  )


def above(name: str, value: float, threshold: float) -> dict:
  """A verdict on one value (a goodput in %, a difference in points)."""
  return stats.verdict(
    stats.summary(name, [value]), threshold=threshold, name=name
  )


def section(*, title: str, rows, targets, notes, config) -> dict:
  """The model's report section (rows from `at_intervals` and checks)."""
  return report_lib.section(
    title=title,
    rows=rows,
    chart_key="goodput_percent",
    columns=[
      "name",
      "goodput_percent",
      "kill_cost_seconds",
      "restart_seconds",
      "lost_seconds",
      "saving_seconds",
      "save_every_seconds",
      "other_percent",
    ],
    targets=targets,
    notes=notes,
    config=config,
  )


def _beside(name: str, costs: dict) -> list[dict]:
  """Rows: a killed run measured, and the model for the same run."""
  every = costs["fault_every_seconds"]
  return [
    {
      "name": f"{name}: measured, a kill every {every:.0f} s",
      "goodput_percent": costs["window_goodput_percent"],
      "kill_cost_seconds": costs["kill_cost_seconds"],
      "restart_seconds": costs["restart_seconds"],
      "other_percent": costs["other_percent"],
    },
    {
      "name": f"{name}: model, same run",
      "goodput_percent": predicted(costs),
      "kill_cost_seconds": predicted_kill_cost(costs),
    },
  ]


def checked_section(
  *, found: dict, modes, save_local: float, save_bucket: float, config
) -> dict:
  """The model checked against the killed runs, then at 5 and 30 minutes.

  Args:
    found: {mode name: a `tiers_lib` killed run, with its "costs"}.
    modes: tiers_lib.GOODPUT_MODES.
    save_local, save_bucket: median seconds a save blocks the step, to the
      local tier and to gs:// (the section's rounds).
    config: the section's settings.
  """
  rows, targets, later = [], [], []
  for name, _, tiers in modes:
    costs = found[name]["costs"]
    rows += _beside(name, costs)
    targets.append(
      agreement(name, costs["kill_cost_seconds"], predicted_kill_cost(costs))
    )
    later += at_intervals(
      name,
      restart_seconds=costs["restart_seconds"],
      save_seconds=save_bucket if tiers == "off" else save_local,
    )
  return section(
    title="Goodput model (small CNN): checked against the killed runs, "
    f"then at a kill every {' and '.join(map(str, MINUTES))} minutes",
    rows=rows + later,
    targets=targets,
    notes=[
      "Measured: the goodput of each killed run's fault window (the run "
      "less its first start-up and its final evaluation and export), and "
      "what each kill cost (the window's seconds that were not goodput, per "
      "kill); model: restart + half a save interval + the saves, per kill, "
      "with "
      "the run's own restart seconds (from each kill to the end of the "
      "chief's first resumed loop), its ledger's save seconds and its save "
      "interval (5 steps with "
      "the local tier, 50 without). other_percent: the window's "
      "bookkeeping outside any phase (logging, summaries, the loop's "
      "duties, and a chief blocked on its dead peer until it fails), large "
      "for a model whose step takes milliseconds: the measured cost of a "
      "kill counts it, the model does not. The check compares the cost of "
      "a kill, not the goodput: with kills seconds apart the goodput left "
      "is a small difference of large numbers.",
      "At 5 and 30 minutes: the same restart seconds; a save blocks "
      f"{save_bucket:.3g} s to gs:// (bucket only) or {save_local:.3g} s "
      "to the local tier (the rounds above), every Young/Daly interval.",
      "A restart here costs seconds against milliseconds of steps, so "
      "goodput is restart-bound at every interval; the ResNet50 section "
      "(--only=checkpoint_tiers_resnet50) gives the issue's target.",
    ],
    config=config,
  )


def timed_restarts(model: str, root: str, *, timeout: int) -> dict:
  """One restart of `model` per way of coming back (restart_lib: worker 1
  SIGKILLed, seconds to the chief's first resumed step), each with its
  ledger's parts: {"cluster" | "spare": {segment: seconds, "parts": ...}}.
  """
  os.makedirs(root, exist_ok=True)
  found = {}
  for mode in ("cluster", "spare"):
    model_dir = os.path.join(root, mode)
    config = restart_lib.Config(
      model=model, kill_step=5, run_timeout_secs=timeout
    )
    found[mode] = restart_lib.one_restart(mode, config, model_dir)
    found[mode]["parts"] = restart_parts(model_dir)
    found[mode]["phases"] = restart_phases(model_dir)
  return found


def restart_phases(model_dir: str) -> dict:
  """The starts after the first, by restart phase (ctl-report's table,
  ctl.telemetry.restart_phases), summed: {phase: seconds}."""
  rows = restart_phases_lib.restart_phases(_accounting(model_dir))[1:]
  return {
    p: sum(row[p] for row in rows) for p in restart_phases_lib.RESTART_PHASES
  }


def restarts_section(
  *, model: str, modes, restarts: dict, seconds: dict, config
) -> dict:
  """The model at 5 and 30 minutes from timed restarts (`timed_restarts`).

  Args:
    model: the model's name, for the title.
    modes: tiers_lib.GOODPUT_MODES, (name, "cluster" | "spare", tiers).
    restarts: from `timed_restarts` (their restores: the local tier).
    seconds: median seconds of the section's rounds: save_local,
      save_bucket, restore_local, restore_bucket; and save_local_in_training
      (benchmarks/workloads/save_cost): what a local save costs the training
      around it, when more than the call.
    config: the section's settings.
  """
  # A restart without the local tier restores from the bucket instead.
  from_bucket = max(0.0, seconds["restore_bucket"] - seconds["restore_local"])
  rows, at_five = [], {}
  for name, way, tiers in modes:
    restart = restarts[way]["to_training"]
    restart += from_bucket if tiers == "off" else 0.0
    found = at_intervals(
      name,
      restart_seconds=restart,
      save_seconds=_save_seconds(seconds, tiers),
    )
    at_five[name] = found[0]["goodput_percent"]
    rows += found
  tiered, cold = at_five[modes[-1][0]], at_five[modes[0][0]]
  return section(
    title=f"Goodput model ({model}): a kill every "
    f"{' and '.join(map(str, MINUTES))} minutes, from this run's restarts "
    "and saves",
    rows=rows,
    targets=[
      above(
        f"{model} goodput at a kill every 5 min with the tiers (%)",
        tiered,
        90.0,
      ),
      above(
        f"{model} at 5 min: tiers minus cluster restart, bucket only (points)",
        tiered - cold,
        10.0,
      ),
    ],
    notes=_restart_notes(restarts, seconds, from_bucket),
    config=config,
  )


def _save_seconds(seconds: dict, tiers: str) -> float:
  """A save's cost: the bucket's blocks the step; a local one's is what it
  costs the training around it, if more than the call."""
  if tiers == "off":
    return seconds["save_bucket"]
  return max(seconds["save_local"], seconds.get("save_local_in_training", 0.0))


def _restart_notes(restarts: dict, seconds: dict, from_bucket: float) -> list:
  spare = restarts["spare"]
  parts = ", ".join(
    f"{category} {value:.1f} s" for category, value in spare["parts"].items()
  )
  return [
    "Restart seconds: worker 1 SIGKILLed, until the chief ends its first "
    "resumed loop, less that loop's steps at the fastest step time before "
    "the kill (they train: goodput) (restart_lib, 2 workers on loopback "
    "sharing this machine's cores): cluster "
    f"{restarts['cluster']['to_training']:.1f} s, agent + spare "
    f"{spare['to_training']:.1f} s, both restoring from the local tier; "
    f"bucket only adds {from_bucket:.2f} s (restore from gs:// less from "
    "the local tier, the rounds above).",
    f"Where the spare's {spare['to_training']:.1f} s go: the chief "
    f"went down {spare['to_chief_down']:.1f} s after the kill, its "
    f"restart's first mark at {spare['to_first_mark']:.1f} s, restored at "
    f"{spare['to_restored']:.1f} s, its first resumed loop ended at "
    f"{spare['to_resumed_step']:.1f} s; its ledger: {parts}.",
    "Each way's restart by phase (its ledger, as ctl-report prints it: "
    f"{', '.join(restart_phases_lib.RESTART_PHASES)}): "
    + "; ".join(
      f"{way} "
      + " / ".join(f"{v:.1f}" for v in restarts[way]["phases"].values())
      + f" = {sum(restarts[way]['phases'].values()):.1f} s"
      for way in ("cluster", "spare")
    )
    + ".",
    f"Saves cost {_save_seconds(seconds, 'on'):.2f} s (local tier: the "
    "training's loss per save, measured in training, with the write on a "
    f"thread; the call blocks {seconds['save_local']:.3f} s) and "
    f"{seconds['save_bucket']:.2f} s (gs://, blocking), every Young/Daly "
    "interval sqrt(2 x save x fault interval); lost work is half an "
    "interval.",
  ]
