"""Medians, spreads, per-round ratios, their intervals, and verdicts.

Every benchmark here repeats its measurement in rounds (variants interleaved
A B C A B C ...), so a comparison is made round by round: the ratio of two
variants is the median of their per-round ratios, its min-max range says how
much the machine's noise moved single rounds, and a 95% confidence interval
(a seeded bootstrap of the per-round ratios' median, so the same rounds give
the same interval) says where the median itself may lie. A ">= threshold"
target is then PASS when the whole interval reaches the threshold, MISS when
it lies wholly below, and UNDECIDED when it straddles the threshold: a repeat
run could give either verdict. A MISS is "clear" when even the best round is
below the threshold. A target measured once (a count, one run) has no
interval: its one value decides. docs/benchmarks.md, "How a verdict is
decided", is the reader's version.
"""

from collections.abc import Sequence
import statistics

import numpy as np

CONFIDENCE = 0.95
# Resampled medians per interval: the interval's ends move by well under 1%
# of the spread between seeds at this count, and it costs ~1 ms.
_RESAMPLES = 2000
_SEED = 0
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


def interval(
  values: Sequence[float], *, seed: int = _SEED
) -> tuple[float, float]:
  """The CONFIDENCE interval of the median of `values`, by bootstrap.

  `_RESAMPLES` resamples of the values (with replacement, as many as there
  are), each one's median, and the percentiles that leave (1 - CONFIDENCE)/2
  out at each end. The generator is seeded, so the same values always give
  the same interval. With few rounds the interval is about their min-max
  range, as it should be: three rounds cannot say more.

  Args:
    values: one measurement per round (at least one).
    seed: the resampling's seed.

  Returns:
    (low, high); (v, v) for a single value v.

  Raises:
    ValueError: no values.
  """
  if not values:
    raise ValueError("interval() needs at least one value.")
  data = np.asarray(values, dtype=float)
  rng = np.random.default_rng(seed)
  picks = rng.integers(0, len(data), size=(_RESAMPLES, len(data)))
  medians = np.median(data[picks], axis=1)
  tail = 100 * (1 - CONFIDENCE) / 2
  low, high = np.percentile(medians, [tail, 100 - tail])
  return float(low), float(high)


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
    "rounds": len(ratio_summary["per_round"]),
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
