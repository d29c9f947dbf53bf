"""Renders a report (see `report.py`) as Markdown: targets first, then sections.

Nothing is hidden: every target is listed with its measured ratio and range,
a MISS reads MISS, and a verdict whose range straddles the threshold says it
is inside the noise.
"""

from collections.abc import Mapping
from typing import Any

from benchmarks import report as report_lib

_HEADERS = {
  "name": "variant",
  "images_per_second": "images/s",
  "examples_per_second": "examples/s",
  "first_call_seconds": "first call s",
  "steps_per_loop": "steps/call",
  "mfu_percent": "MFU %",
  "flops_per_second": "FLOP/s",
  "peak_flops_per_second": "peak FLOP/s",
  "examples_per_second_per_worker": "examples/s per worker",
  "wall_seconds": "wall s",
}


def render(report: Mapping[str, Any]) -> str:
  """The whole report as one Markdown document."""
  machine = report.get("machine", {})
  lines = [f"# ctl benchmarks, {report.get('created', '')}", ""]
  if machine:
    lines += [", ".join(f"{k}: {_format(v)}" for k, v in machine.items()), ""]
  lines += _targets(report)
  for name, body in report["sections"].items():
    lines += _section(name, body)
  return "\n".join(lines).rstrip() + "\n"


def verdict_text(target: Mapping[str, Any]) -> str:
  """E.g. "PASS 1.01x (0.97-1.03: inside the noise)"."""
  if target["measured"] is None:
    return target["status"]
  text = (
    f"{target['status']} {target['measured']:.3g}x "
    f"({target['min']:.3g}-{target['max']:.3g}"
  )
  if target.get("inside_noise"):
    text += ": inside the noise"
  return text + ")"


def _targets(report) -> list[str]:
  targets = report_lib.all_targets(report)
  lines = ["## Targets", ""]
  if not targets:
    return lines + ["No target was measured in this run.", ""]
  lines += _table(
    ["section", "target", "ratio", "threshold", "verdict"],
    [
      [
        t["section"],
        t["name"],
        t["ratio"] or "-",
        f">= {t['threshold']:g}x",
        verdict_text(t),
      ]
      for t in targets
    ],
  )
  missing = [n for n, s in report["sections"].items() if s["status"] != "ok"]
  if missing:
    lines.append(f"Sections without numbers: {', '.join(missing)} (see below).")
    lines.append("")
  return lines


def _section(name: str, body: Mapping[str, Any]) -> list[str]:
  lines = [f"## {body.get('title', name)} (`{name}`)", ""]
  status = body.get("status", "ok")
  facts = [f"status: **{status}**"]
  if "seconds" in body:
    facts.append(f"took {body['seconds']:.0f} s")
  lines += ["; ".join(facts), ""]
  config = body.get("config") or {}
  if config:
    lines += [
      "Settings: " + ", ".join(f"{k}={_format(v)}" for k, v in config.items()),
      "",
    ]
  rows = body.get("rows") or []
  columns = body.get("columns") or []
  if rows and columns:
    lines += _table(
      [_HEADERS.get(c, c) for c in columns],
      [[_cell(row, c) for c in columns] for row in rows],
    )
  ratios = body.get("ratios") or []
  if ratios:
    lines += _table(
      ["ratio", "median", "min-max", "per round"],
      [
        [
          r["name"],
          f"{r['median']:.3g}x",
          f"{r['min']:.3g}-{r['max']:.3g}",
          " ".join(f"{x:.3g}" for x in r["per_round"]),
        ]
        for r in ratios
      ],
    )
  for target in body.get("targets") or []:
    lines.append(f"- Target {target['name']}: {verdict_text(target)}")
  notes = body.get("notes") or []
  lines += [f"- {note}" for note in notes]
  if notes or body.get("targets"):
    lines.append("")
  return lines


def _cell(row: Mapping[str, Any], key: str) -> str:
  if key not in row:
    return ""
  text = _format(row[key])
  low, high = row.get(f"{key}_min"), row.get(f"{key}_max")
  if low is not None and high is not None:
    text += f" ({_format(low)}-{_format(high)})"
  return text


def _format(value) -> str:
  if value is None:
    return "-"
  if isinstance(value, bool):
    return "yes" if value else "no"
  if isinstance(value, float):
    if value == 0 or 0.01 <= abs(value) < 1e6:
      return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return f"{value:.3g}"
  if isinstance(value, (list, tuple)):
    return " ".join(_format(v) for v in value)
  return str(value).replace("|", "/")


def _table(headers, rows) -> list[str]:
  lines = [
    "| " + " | ".join(headers) + " |",
    "|" + "|".join(" --- " for _ in headers) + "|",
  ]
  lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return lines + [""]
