"""The results document: sections written by benchmark apps, merged in one.

Each benchmark app writes a JSON object `{section_name: section}` (usually one
section) to the file named by its `--output` flag; `run_all` merges them, in
run order, into the report:

  {
    "schema": 1,
    "created": "2026-01-31T12:00:00Z",
    "machine": {"cpu": ..., "cpu_count": ..., "tensorflow": ..., ...},
    "sections": {"resnet50": {...}, "checkpointing": {...}, ...}
  }

A section, as built by `section()`:

  {
    "title": "ResNet50 training throughput",
    "status": "ok",            # partial failed timeout pending skipped
    "config": {...},           # what was measured: sizes, device, flags
    "columns": ["name", "images_per_second", ...],   # the Markdown table
    "chart_key": "images_per_second",                # the PNG's bars
    "rows": [{"name": "engine spl=1", "images_per_second": 3.2, ...}],
    "ratios": [...],           # from stats.ratio()
    "targets": [...],          # from stats.verdict(); PASS MISS UNDECIDED
    "notes": ["..."],
    "seconds": 312.5,          # the app's wall time (set by run_all)
    "machine": {...}           # machine.state() over it (set by run_all)
  }

A row value `k` with `k_min` and `k_max` beside it is shown as
"median (min-max)". Adding a benchmark is one line in `run_all.BENCHMARKS`
plus an app that calls `section()` and `cli.emit()`; nothing here changes.
"""

from collections.abc import Mapping, Sequence
import datetime
import json
import os
from typing import Any

SCHEMA_VERSION = 1
# partial: an app's progress write (some rounds done), which run_all keeps
# when it stops the app at its time limit.
STATUSES = ("ok", "partial", "failed", "timeout", "pending", "skipped")
RESULTS_JSON = "results.json"
REPORT_MD = "report.md"
CHART_PNG = "chart.png"
LATEST = "latest"


def section(
  *,
  title: str,
  rows: Sequence[Mapping[str, Any]] = (),
  columns: Sequence[str] | None = None,
  chart_key: str = "images_per_second",
  ratios: Sequence[Mapping[str, Any]] = (),
  targets: Sequence[Mapping[str, Any]] = (),
  notes: Sequence[str] = (),
  config: Mapping[str, Any] | None = None,
  status: str = "ok",
) -> dict:
  """Builds one report section.

  Args:
    title: a human title.
    rows: one dict per measured thing; each has a "name".
    columns: row keys the Markdown table shows, in order; defaults to the
      first row's scalar keys.
    chart_key: the row key the PNG chart draws as bars (rows without it are
      not drawn).
    ratios: dicts from `stats.ratio()`.
    targets: dicts from `stats.verdict()`.
    notes: sentences for the reader (skipped variants, caveats, sizes).
    config: the settings that produced the numbers.
    status: one of STATUSES.

  Returns:
    The section as a JSON-ready dict.

  Raises:
    ValueError: unknown status, or a row without a name.
  """
  if status not in STATUSES:
    raise ValueError(f"status must be one of {STATUSES}, got {status!r}.")
  rows = [dict(row) for row in rows]
  for row in rows:
    if "name" not in row:
      raise ValueError(f"Every row needs a 'name': {row}.")
  if columns is None:
    columns = [k for k, v in rows[0].items() if _is_scalar(v)] if rows else []
  return {
    "title": title,
    "status": status,
    "config": dict(config or {}),
    "columns": list(columns),
    "chart_key": chart_key,
    "rows": rows,
    "ratios": [dict(r) for r in ratios],
    "targets": [dict(t) for t in targets],
    "notes": list(notes),
  }


def placeholder(*, title: str, status: str, note: str) -> dict:
  """A section that holds no measurement, only why (failed, pending, ...)."""
  return section(title=title, status=status, notes=[note])


def new_report(machine: Mapping[str, Any]) -> dict:
  """An empty report stamped with the current UTC time."""
  created = datetime.datetime.now(datetime.UTC)
  return {
    "schema": SCHEMA_VERSION,
    "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
    "machine": dict(machine),
    "sections": {},
  }


def merge(
  report: Mapping[str, Any], sections: Mapping[str, Mapping[str, Any]]
) -> dict:
  """Returns a copy of `report` with `sections` appended in their order.

  Raises:
    ValueError: a section name is already in the report.
  """
  merged = dict(report, sections=dict(report["sections"]))
  for name, body in sections.items():
    if name in merged["sections"]:
      raise ValueError(f"Section {name!r} is already in the report.")
    merged["sections"][name] = dict(body)
  return merged


def all_targets(report: Mapping[str, Any]) -> list[dict]:
  """Every target of every section, each with its section's name added."""
  return [
    dict(target, section=name)
    for name, body in report["sections"].items()
    for target in body.get("targets", ())
  ]


def write_sections(path: str, sections: Mapping[str, Mapping]) -> None:
  """Writes an app's `{name: section}` object (its `--output` file)."""
  with open(path, "w") as f:
    json.dump(sections, f, indent=2, default=_json_default)


def read_sections(path: str) -> dict:
  with open(path) as f:
    return json.load(f)


def new_run_dir(results_dir: str, now: datetime.datetime | None = None) -> str:
  """Creates `<results_dir>/<YYYYmmdd-HHMMSS>` (suffixed if it exists)."""
  stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
  path = os.path.join(results_dir, stamp)
  suffix = 1
  while os.path.exists(path):
    suffix += 1
    path = os.path.join(results_dir, f"{stamp}-{suffix}")
  os.makedirs(path)
  return path


def write_json(report: Mapping[str, Any], run_dir: str) -> str:
  path = os.path.join(run_dir, RESULTS_JSON)
  with open(path, "w") as f:
    json.dump(report, f, indent=2, default=_json_default)
  return path


def point_latest(results_dir: str, run_dir: str) -> str:
  """Makes `<results_dir>/latest` a relative symlink to `run_dir`.

  Replaced atomically, so a reader never sees it missing; where symlinks are
  not allowed, `latest` becomes a copy of the run directory instead.
  """
  latest = os.path.join(results_dir, LATEST)
  target = os.path.relpath(run_dir, results_dir)
  temporary = f"{latest}.tmp{os.getpid()}"
  try:
    os.symlink(target, temporary)
    os.replace(temporary, latest)
  except OSError:  # No links here, or `latest` is such a copy already.
    import shutil  # pylint: disable=g-import-not-at-top

    if os.path.lexists(temporary):
      os.remove(temporary)
    if os.path.islink(latest) or os.path.isfile(latest):
      os.remove(latest)
    elif os.path.isdir(latest):
      shutil.rmtree(latest)
    shutil.copytree(run_dir, latest)
  return latest


def _is_scalar(value) -> bool:
  return isinstance(value, (str, int, float, bool)) or value is None


def _json_default(value):
  """Numpy scalars and arrays become plain numbers and lists."""
  if hasattr(value, "tolist"):
    return value.tolist()
  return str(value)
