"""A section's time budget: how much of its planned work fits in it.

Machines of our kind differ 2x or more in speed, so fixed rounds and steps
that fit a section's timeout on one time it out on another. `run_all` gives
each app `--time_budget_secs` (a safe part of the section's timeout); the app
measures its first unit of work (a round, a step, a batch), estimates the rest
at that pace and, if it would not fit, cuts rounds first (never below 1), then
steps (never below a floor that keeps the measurement meaningful). Nothing is
cut without a budget (an app run by hand) or when everything fits, so what a
section measures then is unchanged. The section's notes say what was cut and
its config records the planned and the used values.
"""

from collections.abc import Callable, Iterator
import time


def plan(
  first_unit_secs: float,
  units_planned: int,
  budget_secs: float | None,
  spent_secs: float,
  floor: int = 1,
) -> int:
  """How many of `units_planned` units fit, the first (done) among them.

  Each further unit is estimated to take `first_unit_secs`; `spent_secs`
  (the first unit included) is what the section used so far. Never fewer
  than `floor` (nor than 1, nor more than planned); all of them without a
  budget (None or 0).
  """
  if not budget_secs:
    return units_planned
  more = _count(first_unit_secs, budget_secs - spent_secs, units_planned)
  return _clamp(1 + more, floor, units_planned)


def plan_rounds_and_steps(
  step_secs: float,
  rounds_planned: int,
  steps_planned: int,
  budget_secs: float | None,
  spent_secs: float,
  steps_floor: int,
  runs_per_round: int = 1,
) -> tuple[int, int]:
  """(rounds, steps per run) that fit work not started yet.

  A round is `runs_per_round` runs of `steps_planned` steps of `step_secs`
  each. Rounds are cut first (never below 1); when one round does not fit
  either, steps (never below `steps_floor`).
  """
  if not budget_secs:
    return rounds_planned, steps_planned
  left = budget_secs - spent_secs
  round_secs = step_secs * steps_planned * runs_per_round
  rounds = _clamp(_count(round_secs, left, rounds_planned), 1, rounds_planned)
  if rounds > 1 or round_secs <= left:
    return rounds, steps_planned
  steps = _count(step_secs * runs_per_round, left, steps_planned)
  return 1, _clamp(steps, steps_floor, steps_planned)


def plan_by_estimate(
  estimate_secs: Callable[[int], float],
  planned: int,
  budget_secs: float | None,
  spent_secs: float,
  floor: int = 1,
) -> int:
  """The most units, up to `planned`, whose work not started yet fits.

  For work whose cost is not a multiple of its units (runs of N epochs,
  each with a start-up): `estimate_secs(n)` is the seconds still to spend
  with n units. Never fewer than `floor` (nor than 1); all of them without
  a budget (None or 0).
  """
  if not budget_secs:
    return planned
  left = budget_secs - spent_secs
  fitting = (n for n in range(planned, 0, -1) if estimate_secs(n) <= left)
  return _clamp(next(fitting, 1), floor, planned)


def _count(unit_secs: float, left_secs: float, most: int) -> int:
  """Whole units of `unit_secs` in `left_secs` (at most `most`, >= 0)."""
  if unit_secs <= 0:
    return most
  return min(most, max(0, int(left_secs // unit_secs)))


def _clamp(value: int, floor: int, planned: int) -> int:
  return max(min(max(floor, 1), planned), min(value, planned))


def note(
  budget_secs: float, cuts: dict[str, tuple[int, int]], first: str
) -> str:
  """What was cut, e.g. "Scaled down to fit its 405 s budget on this machine:
  1 of 2 rounds, 60 of 120 steps (first round took 210 s)."

  Args:
    budget_secs: the section's budget.
    cuts: {what: (used, planned)}, e.g. {"rounds": (1, 2)}.
    first: the measurement the estimate came from, e.g. "first round took
      210 s".
  """
  parts = ", ".join(
    f"{used} of {planned} {what}" for what, (used, planned) in cuts.items()
  )
  return (
    f"Scaled down to fit its {budget_secs:.0f} s budget on this machine: "
    f"{parts} ({first})."
  )


class Budget:
  """A section's budget, its clock (from construction), and what it cut."""

  def __init__(self, secs: float | None):
    self.secs = secs or None
    self._start = time.perf_counter()
    self._planned: dict[str, int] = {}
    self._used: dict[str, int] = {}
    self._first: list[str] = []

  def spent(self) -> float:
    """Seconds since the section started."""
    return time.perf_counter() - self._start

  def fits(self, secs: float) -> bool:
    """Whether `secs` more fit what is left (always, without a budget)."""
    return not self.secs or self.spent() + secs <= self.secs

  def rounds(
    self, first_secs: float, planned: int, *, what: str = "rounds", floor=1
  ) -> int:
    """The rounds that fit, the first (taking `first_secs`) done."""
    used = plan(first_secs, planned, self.secs, self.spent(), floor)
    self.record(
      what, used, planned, f"first {what[:-1]} took {first_secs:.0f} s"
    )
    return used

  def each_round(self, planned: int, what: str = "rounds") -> Iterator[int]:
    """Round indices 0, 1, ...: the loop's body of round 0 is timed, and the
    rounds after it are those that fit (`rounds`)."""
    if planned < 1:
      return
    start = time.perf_counter()
    yield 0
    yield from range(
      1, self.rounds(time.perf_counter() - start, planned, what=what)
    )

  def record(self, what: str, used: int, planned: int, first: str) -> None:
    """Notes `used` of `planned` `what`; a cut names `first`, its estimate."""
    self._planned[what], self._used[what] = planned, used
    if used < planned and first not in self._first:
      self._first.append(first)

  def notes(self) -> list[str]:
    """The scaled-down note, or none when nothing was cut."""
    cuts = {
      what: (self._used[what], planned)
      for what, planned in self._planned.items()
      if self._used[what] < planned
    }
    if not cuts:
      return []
    return [note(self.secs, cuts, "; ".join(self._first))]

  def stamp(self, body: dict) -> dict:
    """A report section `body` with the notes and `config()` added."""
    return {
      **body,
      "notes": [*body["notes"], *self.notes()],
      "config": {**body["config"], **self.config()},
    }

  def config(self) -> dict:
    """For the section's config: the budget, and planned vs used values."""
    if not self.secs:
      return {}
    return {
      "time_budget_secs": self.secs,
      "planned": dict(self._planned),
      "used": dict(self._used),
    }
