"""The `CTL_*` environment: what a worker is told besides its flags, in one place.

`ctl.launch` hands every worker it starts a few facts it cannot learn
otherwise, and tests and benchmarks ask a run for their machinery, through
these variables. Every name lives here and every reader goes through the
functions below, which check a value and say what is wrong with it in one
sentence (`UserError`, exit 2) rather than a traceback:

  CTL_RESTART_COUNT       restarts of the job before this start (0, 1, ...)
  CTL_PREVIOUS_EXIT       how the previous start ended: the failed worker's
                          exit code, or -N when signal N killed it
  CTL_PREVIOUS_EXIT_TIME  when it ended, in seconds since the epoch
  CTL_JOB_ID              one id for every start of a job (ctl.resilience.lease;
                          ctl.platform.resolver.job_id asks it, else the
                          platform's); a blank one is no id
  CTL_HEARTBEAT_DIR       where the workers' watchdogs beat (ctl.launch.heartbeats)
  CTL_ATTEMPT_START       when a warm spare was handed its start (ctl.launch.spare)
  CTL_EVENTS              a file for the run's progress events (ctl.telemetry.progress)
  CTL_FAULTS              faults to inject (ctl.resilience.faults), tests and benchmarks
  CTL_FAULTS_ENABLED      1 lets CTL_FAULTS act; without it a set CTL_FAULTS
                          is ignored with one warning, so a variable left in
                          a shell or a container spec never breaks a real job
  CTL_TIER_POINTER        the node agent's file in which its worker says
                          where its local checkpoint tier is
                          (ctl.checkpoint.tiers.local_tier)
  CTL_TIER_PORT           the port of the node agent's checkpoint file
                          service (ctl.checkpoint.tiers.peer_tier)

A value that is well formed but cannot be true of this process (a
`CTL_ATTEMPT_START` before the process started or after now, a
`CTL_PREVIOUS_EXIT_TIME` after now: a variable left in a shell) is said in
one warning and read as not given, so the run records what it can see.

What a platform sets (TF_CONFIG, Vertex AI's variables, a Kubernetes pod's
`CTL_JOBSET_*` from its manifest) is ctl.platform's. This module imports
nothing else of `ctl` but its errors and `ctl.processes` (nor absl), so
every layer, and the system Python of `make container-check`, may use it.
"""

from collections.abc import Callable, Mapping
import logging
import math
import os
import time

from ctl import processes
from ctl.errors import UserError

RESTART_COUNT = "CTL_RESTART_COUNT"
PREVIOUS_EXIT = "CTL_PREVIOUS_EXIT"
PREVIOUS_EXIT_TIME = "CTL_PREVIOUS_EXIT_TIME"
JOB_ID = "CTL_JOB_ID"
HEARTBEAT_DIR = "CTL_HEARTBEAT_DIR"
ATTEMPT_START = "CTL_ATTEMPT_START"
EVENTS = "CTL_EVENTS"
FAULTS = "CTL_FAULTS"
FAULTS_ENABLED = "CTL_FAULTS_ENABLED"
TIER_POINTER = "CTL_TIER_POINTER"
TIER_PORT = "CTL_TIER_PORT"
# How far a handed time may lie outside what this process sees: the
# launcher writes it to the millisecond, /proc counts in clock ticks.
_CLOCK_SLACK_SECS = 1.0
_warned = set()  # The (name, value) pairs already warned of, once each.


def restart_count(environ: Mapping[str, str] = os.environ) -> int:
  """The launcher's restart count of this start; 0 when unset.

  Raises:
    UserError: for a value that is not a whole number 0 or more.
  """
  count = _read(environ, RESTART_COUNT, int, lambda n: n >= 0)
  return 0 if count is None else count


def previous_exit(environ: Mapping[str, str] = os.environ) -> int | None:
  """How the previous start ended (an exit code, -N for signal N), or None.

  Raises:
    UserError: for a value that is not an integer.
  """
  return _read(environ, PREVIOUS_EXIT, int, lambda _: True)


def previous_exit_time(environ: Mapping[str, str] = os.environ) -> float | None:
  """When the previous start ended (seconds since the epoch), or None.

  None also for a time after now, with one warning: it cannot be true.

  Raises:
    UserError: for a value that is not a time.
  """
  ended = _read(environ, PREVIOUS_EXIT_TIME, float, _is_time)
  if ended is not None and ended > time.time() + _CLOCK_SLACK_SECS:
    return _untrue(PREVIOUS_EXIT_TIME, ended, "after now")
  return ended


def attempt_start(environ: Mapping[str, str] = os.environ) -> float | None:
  """When a warm spare was handed this start (seconds since the epoch).

  None also, with one warning, for a time this process shows cannot be
  true: before the process started (a spare is handed its start after it
  was made) or after now.

  Raises:
    UserError: for a value that is not a time.
  """
  handed = _read(environ, ATTEMPT_START, float, _is_time)
  if handed is None:
    return None
  now = time.time()
  age = processes.age()
  if age is not None and handed < now - age - _CLOCK_SLACK_SECS:
    return _untrue(ATTEMPT_START, handed, "before this process started")
  if handed > now + _CLOCK_SLACK_SECS:
    return _untrue(ATTEMPT_START, handed, "after now")
  return handed


def _untrue(name: str, value: float, why: str) -> None:
  """Warns, once per value, of a handed time that cannot be true; None."""
  if (name, value) not in _warned:
    _warned.add((name, value))
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
    logging.getLogger(__name__).warning(
      "%s=%r (%s) is %s, which cannot be true of this start (a variable "
      "left in the shell?); it is ignored.",
      name,
      value,
      when,
      why,
    )
  return None


def job_id(environ: Mapping[str, str] = os.environ) -> str:
  """The launcher's job id, "" when unset or blank.

  Blank is unset, as for every variable here: a lease of the same job is
  taken over as that job restarted, so a " " left in two shells must not
  make two separate commands one job.
  """
  return environ.get(JOB_ID, "").strip()


def heartbeat_dir(environ: Mapping[str, str] = os.environ) -> str | None:
  """The directory the launcher reads this worker's heartbeats from."""
  return environ.get(HEARTBEAT_DIR) or None


def events_path(environ: Mapping[str, str] = os.environ) -> str | None:
  """The file a test or benchmark follows the run's progress events in.

  Checked here, not when `ctl.run` opens it, so that a path it cannot open
  fails with the other variables, before training.

  Raises:
    UserError: for a directory, or a file in a directory that does not exist.
  """
  path = environ.get(EVENTS) or None
  if path and (
    os.path.isdir(path) or not os.path.isdir(os.path.dirname(path) or ".")
  ):
    raise UserError(f"{EVENTS} must be {_WHAT[EVENTS]}, not {path!r}.")
  return path


def faults(environ: Mapping[str, str] = os.environ) -> str:
  """The faults asked for (CTL_FAULTS), "" for none; see `faults_enabled`."""
  return environ.get(FAULTS, "").strip()


def faults_enabled(environ: Mapping[str, str] = os.environ) -> bool:
  """Whether CTL_FAULTS_ENABLED=1 lets CTL_FAULTS act (tests, benchmarks).

  Raises:
    UserError: for a value other than 1 or 0.
  """
  switch = environ.get(FAULTS_ENABLED, "").strip()
  if switch not in ("", "0", "1"):
    raise UserError(f"{FAULTS_ENABLED} must be 1 or 0, not {switch!r}.")
  return switch == "1"


def faults_environment(spec: str) -> dict[str, str]:
  """The variables that make a run inject the faults `spec` (tests, benches)."""
  return {FAULTS: spec, FAULTS_ENABLED: "1"}


def check(environ: Mapping[str, str] = os.environ) -> None:
  """Reads every checked variable once, so a bad one fails before training.

  Raises:
    UserError: for the first malformed value, in one sentence.
  """
  for reader in (
    restart_count,
    previous_exit,
    previous_exit_time,
    attempt_start,
    faults_enabled,
    events_path,
  ):
    reader(environ)


def _is_time(seconds: float) -> bool:
  return math.isfinite(seconds) and seconds >= 0


_WHAT = {
  RESTART_COUNT: "a whole number 0 or more (the launcher's restart count)",
  PREVIOUS_EXIT: "an exit code (an integer; -N for signal N)",
  PREVIOUS_EXIT_TIME: "a time in seconds since the epoch",
  ATTEMPT_START: "a time in seconds since the epoch",
  EVENTS: "a file in an existing directory (for the run's progress events)",
}


def _read(
  environ: Mapping[str, str],
  name: str,
  parse: Callable[[str], int | float],
  valid: Callable[[int | float], bool],
):
  """`parse` of variable `name`, None when unset or empty."""
  text = environ.get(name, "").strip()
  if not text:
    return None
  try:
    value = parse(text)
  except ValueError:
    value = None
  if value is None or not valid(value):
    raise UserError(f"{name} must be {_WHAT[name]}, not {text!r}.")
  return value
