"""Reads the run ledger (ctl.telemetry.ledger) back: every attempt's events,
in the order the attempts were numbered, each line checked.

A reader must never fail on what a crash or a hand edit left in a file: a
line that is not JSON (a write cut short) is skipped silently; a JSON line
that is not a ledger event of the right field types is skipped with a
warning naming the file and the line. What is checked is what the readers
(ctl.telemetry.goodput, `ctl-report`) rely on. Reading needs neither
TensorFlow nor the writer: gs:// is read through gcsfs.
"""

import json
import math
import posixpath

from absl import logging

from ctl.telemetry import progress as progress_lib

SUBDIR = "ledger"
SUFFIX = ".jsonl"  # One attempt's events, a JSON object a line.


def ledger_dir(model_dir: str) -> str:
  """Where the ledger of the run in `model_dir` lives."""
  return posixpath.join(model_dir.rstrip("/"), SUBDIR)


def read(
  directory: str, *, storage_route: str = "auto", fuse_root: str = "/gcs"
) -> list[list[dict]]:
  """Every attempt's events from a ledger directory, in start order.

  Args:
    directory: a ledger directory (local, FUSE or gs://).
    storage_route: how a gs:// directory is read (ctl.io.storage.ROUTES).
    fuse_root: where Cloud Storage FUSE mounts buckets.

  Returns:
    One list of events per attempt; empty when there is no ledger.
  """
  return sorted(
    (
      events
      for _, events in read_files(
        directory, storage_route=storage_route, fuse_root=fuse_root
      )
    ),
    key=order,
  )


def parse(text: str, *, source: str = "the ledger") -> list[dict]:
  """The events of one attempt's file; unreadable lines are skipped.

  A line that is not JSON (e.g. the last line of a write a crash cut short)
  is skipped silently; a JSON line that is not a ledger event of the right
  field types (a hand edit, another tool) is skipped with a warning naming
  `source` and the line, so that no line can fail a run or a report.
  """
  events = []
  for number, line in enumerate(text.splitlines(), start=1):
    try:
      event = json.loads(line)
    except ValueError:
      continue
    problem = _problem(event)
    if problem:
      logging.warning("Skipped line %d of %s: %s.", number, source, problem)
    else:
      events.append(event)
  return events


def _is_number(value) -> bool:
  return (
    isinstance(value, (int, float))
    and not isinstance(value, bool)
    and math.isfinite(value)
  )


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


# What a reader (ctl.telemetry.goodput) relies on: each field's type wherever it
# appears, and the fields each kind of event must have.
_FIELD_TYPES = {
  "time": ("a number", _is_number),
  "t0": ("a number", _is_number),
  "t1": ("a number", _is_number),
  "busy": ("a number", _is_number),
  "previous_exit_time": (
    "a number or null",
    lambda v: v is None or _is_number(v),
  ),
  "m": ("a number", _is_number),
  "m0": ("a number", _is_number),
  "m1": ("a number", _is_number),
  "sequence": ("an integer", _is_int),
  "step0": ("an integer", _is_int),
  "step": ("an integer", _is_int),
  "loops": ("an integer", _is_int),
  "restart": ("an integer", _is_int),
  "previous_exit": ("an integer or null", lambda v: v is None or _is_int(v)),
  "phase": ("a string", lambda v: isinstance(v, str)),
  "outcome": ("a string", lambda v: isinstance(v, str)),
  "ok": ("true or false", lambda v: isinstance(v, bool)),
  "flags": (
    "a list of strings",
    lambda v: isinstance(v, list) and all(isinstance(f, str) for f in v),
  ),
}
_REQUIRED = {
  "phase": ("phase", "t0", "t1", "step0", "step", "ok"),
  "end": ("time", "step", "outcome"),
}


def _problem(event) -> str | None:
  """What makes `event` unusable as a ledger event; None if nothing."""
  if not isinstance(event, dict) or not isinstance(event.get("event"), str):
    return "not an event (a JSON object with a string field 'event')"
  required = _REQUIRED.get(event["event"], ("time",))
  if (
    event["event"] == "phase" and event.get("phase") == progress_lib.TRAIN_LOOP
  ):
    required += ("busy",)  # Only the loops' phase events carry it.
  for name in required:
    if name not in event:
      return f"a {event['event']} event needs '{name}'"
  for name, (kind, check) in _FIELD_TYPES.items():
    if name in event and not check(event[name]):
      return f"'{name}' is {json.dumps(event[name])}, not {kind}"
  return None


def read_files(
  directory: str, *, storage_route: str, fuse_root: str
) -> list[tuple[str, list[dict]]]:
  """(file name, events) of every attempt's file in `directory` that starts
  with its start event, by name."""
  from ctl.io import storage  # pylint: disable=g-import-not-at-top

  if storage_route == "tf":  # Read the bucket directly, without TensorFlow.
    storage_route = "gcsfs"
  path, fs = storage.read_route(
    directory, storage=storage_route, fuse_root=fuse_root
  )
  if fs is None:  # A local directory or the FUSE mount of the bucket.
    import fsspec  # pylint: disable=g-import-not-at-top

    fs = fsspec.filesystem("file")
  try:
    names = fs.ls(path, detail=False)
  except FileNotFoundError:
    return []
  found = []
  for name in sorted(names):
    if name.endswith(SUFFIX):
      events = parse(
        fs.cat_file(name).decode("utf-8", errors="replace"),
        source=posixpath.join(directory, posixpath.basename(name)),
      )
      if events and events[0]["event"] == "start":
        found.append((posixpath.basename(name), events))
  return found


def order(events: list[dict]) -> tuple[int, float]:
  """Attempts in the order they were numbered; unnumbered ones (written
  before attempts were numbered) first, by start time."""
  return events[0].get("sequence", 0), events[0]["time"]
