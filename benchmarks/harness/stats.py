"""Medians, spreads, per-round ratios, their intervals, and verdicts.

Every benchmark here repeats its measurement in rounds (variants interleaved
A B C A B C ...), so a comparison is made round by round: the ratio of two
variants is the median of their per-round ratios, its min-max range says how
much the machine's noise moved single rounds, and a 95% confidence interval
says where the typical ratio may lie. From 6 rounds on it is the pair of
order statistics that holds the median of any distribution at least that
often (the sign-test interval: no assumption about the noise's shape);
fewer rounds have no such pair (the range of 2 rounds holds the median half
the time), so for 2 to 5 it is Student's t interval of the mean of the
ratios' logarithms (exact when they scatter normally, and as wide as few
rounds must be: 2 rounds that differ by 8% decide nothing). A bootstrap,
used before, called 2 or 3 rounds' range a 95% interval, and its verdicts
swapped run to run. Either way the same rounds always give the same
interval. A ">= threshold" target is then PASS when the whole interval
reaches the threshold, MISS when it lies wholly below, and UNDECIDED when
it straddles the threshold: a repeat run could give either verdict. A MISS
is "clear" when even the best round is below the threshold. A target
measured once (a count, one run) has no interval: its one value decides.
"""

from collections.abc import Sequence
import math
import statistics

CONFIDENCE = 0.95
PASS, MISS, UNDECIDED = "PASS", "MISS", "UNDECIDED"


def spread(values: Sequence[float]) -> dict:
  """The median and the min-max range of repeated measurements.

  Args:
    values: one measurement per round (at least one).

  Returns:
    {"median": ..., "min": ..., "max": ...}.

  Raises:
    ValueError: no values.
  """
  if not values:
    raise ValueError("spread() needs at least one value.")
  return {
    "median": statistics.median(values),
    "min": min(values),
    "max": max(values),
  }


def spread_fields(key: str, values: Sequence[float]) -> dict:
  """A report row's fields for `values`: {key: median, key_min: min,
  key_max: max} (the report shows the median and its range)."""
  summary = spread(values)
  return {
    key: summary["median"],
    f"{key}_min": summary["min"],
    f"{key}_max": summary["max"],
  }


def per_round_ratios(
  numerator: Sequence[float], denominator: Sequence[float]
) -> list[float]:
  """numerator[r] / denominator[r] for every round r.

  Raises:
    ValueError: the two lists cover a different number of rounds, or a
      denominator is not positive.
  """
  if len(numerator) != len(denominator):
    raise ValueError(f"Rounds differ: {len(numerator)} vs {len(denominator)}.")
  if any(d <= 0 for d in denominator):
    raise ValueError("A denominator is not positive.")
  return [n / d for n, d in zip(numerator, denominator)]


def confidence_of(rounds: int, order: int = 1) -> float:
  """How often the `order`-th smallest and `order`-th largest of `rounds`
  independent values hold their distribution's median between them:
  1 - 2 P(Binomial(rounds, 1/2) < order)."""
  below = sum(math.comb(rounds, i) for i in range(order)) / 2**rounds
  return 1 - 2 * below


# The fewest rounds whose range holds the median CONFIDENCE of the time: 6.
MIN_ORDER_ROUNDS = next(
  n for n in range(2, 64) if confidence_of(n) >= CONFIDENCE
)
# Student's t at 97.5% for 1 to 4 degrees of freedom (2 to 5 rounds).
_T_975 = (12.706, 4.303, 3.182, 2.776)
assert CONFIDENCE == 0.95 and len(_T_975) == MIN_ORDER_ROUNDS - 2


def interval(values: Sequence[float]) -> tuple[float, float]:
  """The CONFIDENCE interval of the typical value of `values` (module
  docstring): from MIN_ORDER_ROUNDS values, the narrowest pair of order
  statistics (the k-th smallest and k-th largest) that holds the median at
  least that often (`confidence_of`); from 2 to 5 positive values, Student's
  t interval of the mean of their logarithms (of the values themselves if
  one is not positive).

  Args:
    values: one measurement per round (at least one).

  Returns:
    (low, high); (v, v) for a single value v.

  Raises:
    ValueError: no values.
  """
  ordered = sorted(float(v) for v in values)
  if not ordered:
    raise ValueError("interval() needs at least one value.")
  if len(ordered) == 1:
    return ordered[0], ordered[0]
  if len(ordered) < MIN_ORDER_ROUNDS:
    logs = ordered[0] > 0
    points = [math.log(v) for v in ordered] if logs else ordered
    half = (
      _T_975[len(points) - 2]
      * statistics.stdev(points)
      / math.sqrt(len(points))
    )
    mean = statistics.fmean(points)
    low, high = mean - half, mean + half
    return (math.exp(low), math.exp(high)) if logs else (low, high)
  order = 1
  while confidence_of(len(ordered), order + 1) >= CONFIDENCE:
    order += 1
  return ordered[order - 1], ordered[-order]


def summary(name: str, values: Sequence[float]) -> dict:
  """A named quantity measured once per round: its median, min-max range and
  confidence interval, and the rounds themselves.

  Returns:
    {"name", "per_round", "median", "min", "max", "ci_low", "ci_high"}.
  """
  low, high = interval(values)
  return {
    "name": name,
    "per_round": list(values),
    **spread(values),
    "ci_low": low,
    "ci_high": high,
  }


def ratio(
  *,
  name: str,
  numerator: str,
  denominator: str,
  numerator_values: Sequence[float],
  denominator_values: Sequence[float],
) -> dict:
  """A named ratio of two measured rows, summarised over rounds.

  Args:
    name: how the report calls it, e.g. "engine spl=4 / bare step".
    numerator: the numerator row's name.
    denominator: the denominator row's name.
    numerator_values: the numerator's value in every round.
    denominator_values: the denominator's value in the same rounds.

  Returns:
    `summary()` of the per-round ratios, with "numerator" and
    "denominator".
  """
  rounds = per_round_ratios(numerator_values, denominator_values)
  return {
    **summary(name, rounds),
    "numerator": numerator,
    "denominator": denominator,
  }


def verdict(ratio_summary: dict, *, threshold: float, name: str) -> dict:
  """Judges a ratio against a ">= threshold" target by its interval.

  Args:
    ratio_summary: a dict from `summary()` or `ratio()`.
    threshold: the smallest acceptable ratio.
    name: the target as the report states it.

  Returns:
    {"name", "ratio", "threshold", "measured", "min", "max", "ci_low",
    "ci_high", "rounds", "status", "clear", "reason"}: status is PASS when
    the interval reaches the threshold, MISS when it lies below, else
    UNDECIDED; clear is true for a MISS whose best round is below the
    threshold too; reason says why a verdict is UNDECIDED.
  """
  low, high = ratio_summary["ci_low"], ratio_summary["ci_high"]
  rounds = len(ratio_summary["per_round"])
  if low >= threshold:
    status, reason = PASS, None
  elif high < threshold:
    status, reason = MISS, None
  else:
    status = UNDECIDED
    reason = f"the interval straddles {threshold:g}"
  return {
    "name": name,
    "ratio": ratio_summary["name"],
    "threshold": threshold,
    "measured": ratio_summary["median"],
    "min": ratio_summary["min"],
    "max": ratio_summary["max"],
    "ci_low": low,
    "ci_high": high,
    "rounds": rounds,
    "status": status,
    "clear": status == MISS and ratio_summary["max"] < threshold,
    "reason": reason,
  }


def undecided(target: dict, reason: str) -> dict:
  """`target` made UNDECIDED for `reason` (a busy machine, say), added to
  the reason it had if it was UNDECIDED already; a target that was not
  measured stays as it is."""
  if target["status"] == UNDECIDED:
    return dict(target, reason=f"{target['reason']}; {reason}")
  if target["status"] not in (PASS, MISS):
    return dict(target)
  return dict(target, status=UNDECIDED, clear=False, reason=reason)


def settled(targets: Sequence[dict]) -> bool:
  """Whether no target is UNDECIDED (more rounds could not change one)."""
  return all(t["status"] != UNDECIDED for t in targets)


def not_measured(*, name: str, threshold: float) -> dict:
  """A target whose variants did not run: reported, never silently dropped."""
  return {
    "name": name,
    "ratio": None,
    "threshold": threshold,
    "measured": None,
    "min": None,
    "max": None,
    "ci_low": None,
    "ci_high": None,
    "rounds": 0,
    "status": "NOT MEASURED",
    "clear": False,
    "reason": None,
  }
