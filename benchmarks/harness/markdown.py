"""Renders a report (see `report.py`) as Markdown: targets first, then sections.

Nothing is hidden: every target is listed with its measured ratio, its
confidence interval and range; a MISS reads MISS, an UNDECIDED one says why
(its interval straddles the threshold, or the machine was busy), and each
section shows the machine's state over it (`machine.py`).
"""

from collections.abc import Mapping
from typing import Any

from benchmarks.harness import report as report_lib
from benchmarks.harness import stats

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
  """E.g. "UNDECIDED 0.99x (95% CI 0.97-1.01, range 0.95-1.03, 10 rounds:
  the interval straddles 1)"; a clear miss says that even its best round
  is below."""
  if target["measured"] is None:
    return target["status"]
  rounds = target["rounds"]
  if rounds > 1:
    spread = (
      f"{stats.CONFIDENCE:.0%} CI {target['ci_low']:.3g}-"
      f"{target['ci_high']:.3g}, range {target['min']:.3g}-"
      f"{target['max']:.3g}, {rounds} rounds"
    )
  else:
    spread = "1 round, no interval"
  why = [target["reason"]] if target["reason"] else []
  if target["clear"]:
    why.append("clear miss, even the best round is below")
  why_text = f": {'; '.join(why)}" if why else ""
  return f"{target['status']} {target['measured']:.3g}x ({spread}{why_text})"


def machine_text(state: Mapping[str, Any]) -> str:
  """The machine's state over a section in one line, BUSY first if it was."""
  parts = [f"BUSY ({state['why']})"] if state["busy"] else ["quiet"]
  load = (_format(state["load_start"]), _format(state["load_end"]))
  parts.append("load {} then {}".format(*load))
  for key, label in (("steal_percent", "steal"), ("iowait_percent", "iowait")):
    if state[key] is not None:
      parts.append(f"{label} {state[key]:.1f}%")
  if state["others_cores"] is not None:
    parts.append(f"other processes {state['others_cores']:.2f} cores")
  if state["cpu_mhz"]:
    parts.append(f"{state['cpu_mhz']:.0f} MHz")
  busiest = [
    f"{p['name']} ({p['pid']}) {p['cores']:.2f}" for p in state["busiest"]
  ]
  if busiest:
    parts.append("busiest others: " + ", ".join(busiest))
  return "; ".join(parts)


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
  busy = [n for n, s in report["sections"].items() if _busy(s)]
  if busy:
    lines.append(
      f"Measured on a busy machine, so UNDECIDED: {', '.join(busy)} "
      "(see each section's Machine line)."
    )
    lines.append("")
  missing = [n for n, s in report["sections"].items() if s["status"] != "ok"]
  if missing:
    lines.append(f"Sections without numbers: {', '.join(missing)} (see below).")
    lines.append("")
  return lines


def _busy(body: Mapping[str, Any]) -> bool:
  return bool((body.get("machine") or {}).get("busy"))


def _section(name: str, body: Mapping[str, Any]) -> list[str]:
  lines = [f"## {body.get('title', name)} (`{name}`)", ""]
  status = body.get("status", "ok")
  facts = [f"status: **{status}**"]
  if "seconds" in body:
    facts.append(f"took {body['seconds']:.0f} s")
  lines += ["; ".join(facts), ""]
  if body.get("machine"):
    lines += [f"Machine: {machine_text(body['machine'])}", ""]
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
      ["ratio", "median", f"{stats.CONFIDENCE:.0%} CI", "min-max", "per round"],
      [
        [
          r["name"],
          f"{r['median']:.3g}x",
          f"{r['ci_low']:.3g}-{r['ci_high']:.3g}",
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
