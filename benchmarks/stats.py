"""Medians, spreads, per-round ratios and PASS/MISS verdicts.

Every benchmark here repeats its measurement in rounds (variants interleaved
A B C A B C ...), so a comparison is made round by round: the ratio of two
variants is the median of their per-round ratios, and its min-max range says
how much the machine's noise moved it. A target is met (PASS) when that
median reaches the threshold; the verdict also says when the range straddles
the threshold, i.e. when the difference is inside the noise.
"""

from collections.abc import Sequence
import statistics


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
    {"name", "numerator", "denominator", "per_round", "median", "min",
    "max"}.
  """
  rounds = per_round_ratios(numerator_values, denominator_values)
  return {
    "name": name,
    "numerator": numerator,
    "denominator": denominator,
    "per_round": rounds,
    **spread(rounds),
  }


def verdict(ratio_summary: dict, *, threshold: float, name: str) -> dict:
  """Judges a ratio against a ">= threshold" target.

  Args:
    ratio_summary: a dict from `ratio()`.
    threshold: the smallest acceptable median ratio.
    name: the target as the report states it.

  Returns:
    {"name", "ratio", "threshold", "measured", "min", "max", "status",
    "inside_noise"}: status is "PASS" when the median reaches the threshold,
    else "MISS"; inside_noise is true when the min-max range straddles the
    threshold, so a repeat run could give the other verdict.
  """
  measured = ratio_summary["median"]
  low, high = ratio_summary["min"], ratio_summary["max"]
  return {
    "name": name,
    "ratio": ratio_summary["name"],
    "threshold": threshold,
    "measured": measured,
    "min": low,
    "max": high,
    "status": "PASS" if measured >= threshold else "MISS",
    "inside_noise": low < threshold <= high,
  }


def not_measured(*, name: str, threshold: float) -> dict:
  """A target whose variants did not run: reported, never silently dropped."""
  return {
    "name": name,
    "ratio": None,
    "threshold": threshold,
    "measured": None,
    "min": None,
    "max": None,
    "status": "NOT MEASURED",
    "inside_noise": False,
  }
