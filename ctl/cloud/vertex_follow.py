"""Follows a Vertex AI custom job until it ends, for `ctl-vertex --wait`.

A script or a CI pipeline that submits a job needs to know how it ended:
`follow` reads the job's state every few seconds through the same
`JobServiceClient` that created it, prints each change and, once, where the
job's logs are (the API serves no logs; Cloud Logging has them), the web
access URIs when there are, and returns an exit code: 0 for a succeeded job,
1 with the job's error for a failed, cancelled or expired one. Ctrl-C stops
following and leaves the job running, saying so and how to cancel it, or
with `cancel_on_interrupt` asks Vertex AI to cancel it.
"""

from collections.abc import Callable
import re
import sys
import time
from typing import Any, TextIO
import urllib.parse

from ctl import errors

DEFAULT_POLL_SECS = 30.0
SUCCEEDED = "JOB_STATE_SUCCEEDED"
# States a job does not leave. PAUSED is not one: a paused job may go on.
FAILED = ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED")
PARTLY = "JOB_STATE_PARTIALLY_SUCCEEDED"
FAILED_EXIT_CODE = 1
INTERRUPTED_EXIT_CODE = 130


def follow(
  name: str,
  *,
  client: Any,
  poll_secs: float = DEFAULT_POLL_SECS,
  cancel_on_interrupt: bool = False,
  out: TextIO | None = None,
  sleep: Callable[[float], None] = time.sleep,
) -> int:
  """Prints a custom job's state changes until it ends; returns an exit code.

  Args:
    name: The job's resource name, projects/P/locations/R/customJobs/ID.
    client: The `JobServiceClient` that created it.
    poll_secs: Seconds between two reads of the job.
    cancel_on_interrupt: On Ctrl-C, cancel the job instead of leaving it
      running.
    out: Where the lines go; None: stderr.
    sleep: Waits between reads (a test's stand-in may interrupt it).

  Returns:
    0 for a succeeded job, `FAILED_EXIT_CODE` for one that failed, was
    cancelled, expired or partly succeeded, `INTERRUPTED_EXIT_CODE` when
    Ctrl-C stopped the following.

  Raises:
    errors.UserError: If Vertex AI refuses to show the job (a 4xx answer).
  """
  out = out or sys.stderr
  print(f"Logs: {logs_where(name)}", file=out, flush=True)
  state, uris = None, {}
  try:
    while True:
      job = _read(client, name, out)
      if job is not None and job.state.name != state:
        state = job.state.name
        print(f"{name}: {state}", file=out, flush=True)
      if job is not None and dict(job.web_access_uris) != uris:
        uris = dict(job.web_access_uris)
        for replica, uri in sorted(uris.items()):
          print(f"Web access, {replica}: {uri}", file=out, flush=True)
      if state == SUCCEEDED:
        return 0
      if state in (*FAILED, PARTLY):
        return _failed(name, job, out)
      sleep(poll_secs)
  except KeyboardInterrupt:
    return _interrupted(name, client, cancel_on_interrupt, out)


def logs_where(name: str) -> str:
  """Where the logs of job `name` are: a gcloud command and a console URL."""
  _, project, _, region, _, job_id = name.split("/")
  query = urllib.parse.quote(
    f'resource.type="ml_job"\nresource.labels.job_id="{job_id}"', safe=""
  )
  return (
    f"gcloud ai custom-jobs stream-logs {job_id} --region={region} --project="
    f"{project}, or https://console.cloud.google.com/logs/query;query={query}"
    f"?project={project}"
  )


def unreached_errors() -> tuple[type[BaseException], ...]:
  """What a request to Vertex AI raises when it never reached a decision: no
  route or a refused connection (gRPC's 503, REST's `requests` error, an
  OSError), a token that could not be refreshed, Vertex AI unavailable."""
  # Both come with google-cloud-aiplatform.
  from google.api_core import exceptions as api_exceptions  # pylint: disable=g-import-not-at-top
  from google.auth import exceptions as auth_exceptions  # pylint: disable=g-import-not-at-top

  return (
    api_exceptions.GoogleAPICallError,
    auth_exceptions.GoogleAuthError,
    OSError,
  )


def _read(client: Any, name: str, out: TextIO) -> Any:
  """The job as Vertex AI has it now, or None after a transient error or a
  lost network (said in one line: the next read tries again)."""
  from google.api_core import exceptions as api_exceptions  # pylint: disable=g-import-not-at-top

  try:
    return client.get_custom_job(name=name)
  except api_exceptions.ClientError as e:
    # The REST transport starts its message with the request ("GET url: ").
    reason = re.sub(r"^[A-Z]+ \S+: ", "", e.message).rstrip(".")
    raise errors.UserError(
      f"Vertex AI does not show job {name}: {reason}."
    ) from None
  except unreached_errors() as e:
    api_error = isinstance(e, api_exceptions.GoogleAPICallError)
    said = e.message if api_error else errors.error_sentence(e)
    reason = re.sub(r"^[A-Z]+ \S+: ", "", said).rstrip(".")
  print(f"Reading {name} failed ({reason}); trying again.", file=out)
  return None


def _failed(name: str, job: Any, out: TextIO) -> int:
  """Says how the job ended, with its error, and returns FAILED_EXIT_CODE."""
  ended = job.state.name.removeprefix("JOB_STATE_").lower().replace("_", " ")
  error = job.error.message.rstrip(".")
  print(
    f"error: job {name} {ended}" + (f": {error}." if error else "."),
    file=out,
    flush=True,
  )
  return FAILED_EXIT_CODE


def _interrupted(name: str, client: Any, cancel: bool, out: TextIO) -> int:
  """Ctrl-C: cancels the job if asked, else says it runs on and how to stop
  it; returns INTERRUPTED_EXIT_CODE."""
  _, project, _, region, _, job_id = name.split("/")
  if cancel:
    client.cancel_custom_job(name=name)
    print(f"Asked Vertex AI to cancel {name}.", file=out, flush=True)
  else:
    print(
      f"Stopped following; {name} is still running. Cancel it with: gcloud "
      f"ai custom-jobs cancel {job_id} --region={region} --project={project}",
      file=out,
      flush=True,
    )
  return INTERRUPTED_EXIT_CODE
