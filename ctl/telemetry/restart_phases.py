"""Where each start's seconds went on its way to its first step.

A restart's time, from the failure before it to its first training step,
split into the phases of its way back (RESTART_PHASES), from the goodput
accounting of the run ledger (ctl.telemetry.goodput). ctl-report prints it
per attempt; the checkpoint tiers benchmark sums it per way of coming back.
"""

from ctl.telemetry import goodput

# A start's way back, in order: no process, interpreter and imports, the
# run's parts (model, optimizer, data, strategy), the restore, bookkeeping
# before the first loop, the first loop's tracing, and the work a failure
# cut short before the start kept a step (a first loop killed before it
# ended, steps never saved: redone by the next start).
RESTART_PHASES = (
  "gap",
  "imports",
  "build",
  goodput.RESTORE,
  "before_loop",
  goodput.TRACING,
  goodput.LOST,
)


def restart_phases(accounting: goodput.Accounting) -> list[dict[str, float]]:
  """Each start's seconds from the failure before it to its first step.

  Where a restart's time goes, per attempt: its segments before its first
  training (a killed start that never trained: all of them), split by
  RESTART_PHASES; start-up is split at the end of the imports (the `run`
  event). The phases add up to the start's time to its first step.

  Returns:
    One {phase: seconds} per attempt, in order (the first has no gap).
  """
  rows = []
  for a in accounting.attempts:
    spent = dict.fromkeys(goodput.CATEGORIES, 0.0)
    for s in accounting.segments:
      if s.attempt == a.index and s.category == goodput.GOODPUT:
        break
      if s.attempt == a.index:
        spent[s.category] += s.end - s.start
    imports = min(a.imported or 0.0, spent[goodput.STARTUP])
    rows.append(
      {
        "gap": spent[goodput.RESTART_GAP],
        "imports": imports,
        "build": spent[goodput.STARTUP] - imports,
        goodput.RESTORE: spent[goodput.RESTORE],
        "before_loop": sum(spent.values())
        - spent[goodput.RESTART_GAP]
        - spent[goodput.STARTUP]
        - spent[goodput.RESTORE]
        - spent[goodput.TRACING]
        - spent[goodput.LOST],
        goodput.TRACING: spent[goodput.TRACING],
        goodput.LOST: spent[goodput.LOST],
      }
    )
  return rows
