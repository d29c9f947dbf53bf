"""Draws a report (see `report.py`) as one PNG: a panel per measured section.

Each section with rows carrying its `chart_key` gets a horizontal bar chart
(median, with min-max whiskers); a last panel shows every target's measured
ratio against its threshold, green for PASS, red for MISS and grey for
UNDECIDED.
"""

from collections.abc import Mapping
import textwrap
from typing import Any

import matplotlib

matplotlib.use("Agg")  # Headless: no display on servers or in CI.
from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

from benchmarks.harness import report as report_lib

_LABEL_WIDTH = 45  # Characters in a line of an axis label.


def write(report: Mapping[str, Any], path: str) -> str:
  """Writes the chart to `path` (PNG) and returns the path."""
  panels = [
    (name, body) for name, body in report["sections"].items() if _bars(body)
  ]
  targets = [
    t for t in report_lib.all_targets(report) if t["measured"] is not None
  ]
  count = len(panels) + (1 if targets else 0)
  heights = [0.45 * max(len(_bars(body)), 2) + 1 for _, body in panels]
  if targets:
    heights.append(0.6 * max(len(targets), 2) + 1)  # Labels of 2-3 lines.
  figure, axes = plt.subplots(
    max(count, 1),
    1,
    squeeze=False,
    figsize=(9, max(sum(heights), 2.5)),
    gridspec_kw={"height_ratios": heights or [1]},
  )
  axes = axes[:, 0]
  for axis, (name, body) in zip(axes, panels):
    _draw_section(axis, name, body)
  if targets:
    _draw_targets(axes[len(panels)], targets)
  if not count:
    axes[0].text(0.5, 0.5, "no measurements in this run", ha="center")
    axes[0].axis("off")
  figure.suptitle(f"ctl benchmarks {report.get('created', '')}")
  figure.tight_layout(rect=(0, 0, 1, 0.985))  # Room for the suptitle.
  figure.savefig(path, dpi=100)
  plt.close(figure)
  return path


def _bars(body) -> list[dict]:
  key = body.get("chart_key", "images_per_second")
  return [
    row
    for row in body.get("rows", ())
    if isinstance(row.get(key), (int, float))
  ]


def _draw_section(axis, name, body) -> None:
  key = body.get("chart_key", "images_per_second")
  rows = _bars(body)
  values = [row[key] for row in rows]
  low = [row[key] - row.get(f"{key}_min", row[key]) for row in rows]
  high = [row.get(f"{key}_max", row[key]) - row[key] for row in rows]
  positions = range(len(rows))
  axis.barh(
    positions,
    values,
    xerr=[low, high],
    color="tab:blue",
    ecolor="black",
    capsize=3,
  )
  axis.set_yticks(list(positions), [_label(row["name"]) for row in rows])
  axis.invert_yaxis()
  axis.set_xlabel(key.replace("_", " "))
  axis.set_title(
    textwrap.fill(f"{body.get('title', name)} ({name})", 70), fontsize=9
  )
  for position, value, whisker in zip(positions, values, high):
    axis.text(
      value + whisker, position, f" {_short(value)}", va="center", fontsize=8
    )
  axis.set_xlim(0, max(v + w for v, w in zip(values, high)) * 1.15 or 1)


_COLORS = {"PASS": "tab:green", "MISS": "tab:red"}


def _draw_targets(axis, targets) -> None:
  values = [t["measured"] for t in targets]
  low = [t["measured"] - t["min"] for t in targets]
  high = [t["max"] - t["measured"] for t in targets]
  colors = [_COLORS.get(t["status"], "tab:gray") for t in targets]
  positions = list(range(len(targets)))
  axis.barh(
    positions, values, xerr=[low, high], color=colors, ecolor="black", capsize=3
  )
  for position, target in zip(positions, targets):
    axis.plot(
      [target["threshold"]] * 2,
      [position - 0.4, position + 0.4],
      color="black",
      linewidth=2,
    )
  axis.set_yticks(
    positions,
    [_label(f"{t['section']}: {t['name']}") for t in targets],
    fontsize=8,
  )
  axis.invert_yaxis()
  axis.set_xlabel(
    "measured ratio (bar: median, whiskers: min-max; black tick: threshold)"
  )
  axis.set_title("Targets", fontsize=10)


def _label(text: str) -> str:
  """`text` in lines of at most `_LABEL_WIDTH` characters: a standard run's
  names reach 120, which left a 9-inch figure no room for its axes."""
  return textwrap.fill(text, _LABEL_WIDTH)


def _short(value: float) -> str:
  """1234.5 -> "1,234"; 3.21 -> "3.21"; 5.3e10 -> "5.3e+10"."""
  if abs(value) >= 1e6:
    return f"{value:.3g}"
  return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
