"""Following a run through its progress events (`CTL_EVENTS`), not its logs.

A run started with `CTL_EVENTS=path` appends one JSON line per progress mark
to `path` (`ctl.telemetry.progress.EventsFile`): the phase, the step, the worker, the
attempt, the pid and the times. Tests and benchmarks wait on and read these
events, so a changed log message breaks only tests about logging.
"""

from collections.abc import Callable
import json
import os
import subprocess
import time

Event = dict


def read_events(path: str) -> list[Event]:
  """Every whole line of the events file `path`; [] when there is none yet."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    text = f.read()
  return [
    json.loads(line)
    for line in text.splitlines(keepends=True)
    if line.endswith("\n")
  ]


def wait_for_event(
  path: str,
  matches: Callable[[Event], bool],
  *,
  process: subprocess.Popen,
  timeout: float = 300,
) -> Event:
  """Waits until an event in `path` matches; returns it.

  Raises:
    AssertionError: `process` exited, or `timeout` seconds passed, first.
  """
  deadline = time.monotonic() + timeout
  while True:
    for event in read_events(path):
      if matches(event):
        return event
    if process.poll() is not None:
      raise AssertionError(
        f"exited ({process.returncode}) before the event waited for"
      )
    if time.monotonic() > deadline:
      raise AssertionError(f"no such event in {timeout} s")
    time.sleep(0.05)


def wait_for_step(
  path: str,
  step: int,
  *,
  process: subprocess.Popen,
  worker: int = 0,
  timeout: float = 300,
) -> Event:
  """Waits until `worker` ends a train loop at `step` or later."""
  return wait_for_event(
    path,
    lambda e: (
      e["worker"] == worker
      and e["phase"] in ("first_loop", "train_loop")
      and e["seconds"] is not None
      and e["step"] >= step
    ),
    process=process,
    timeout=timeout,
  )


def restored_steps(path: str, *, worker: int = 0) -> list[int]:
  """The step each start of `worker` restored, in order (0: a fresh start)."""
  return [
    e["step"]
    for e in read_events(path)
    if e["worker"] == worker
    and e["phase"] == "restore"
    and e["seconds"] is not None
    and e["ok"]
  ]


def ended_step(path: str, *, worker: int = 0) -> int | None:
  """The step of `worker`'s last run end mark (e.g. where a stop saved)."""
  ends = [
    e["step"]
    for e in read_events(path)
    if e["worker"] == worker
    and e["phase"] == "run"
    and e["seconds"] is not None
  ]
  return ends[-1] if ends else None
