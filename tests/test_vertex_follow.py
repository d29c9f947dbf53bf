"""ctl.cloud.vertex_follow: `ctl-vertex --submit --wait` follows a custom
job until it ends, against a fake Vertex AI service (tests/test_vertex.py's,
a real HTTP server the real client talks to): each state change once, a
failed read tried again, the exit code saying how the job ended, Ctrl-C
leaving the job running or cancelling it.
"""

import io

import pytest

from ctl import errors
from ctl.cloud import vertex
from ctl.cloud import vertex_follow
from tests.test_vertex import _IMAGE
from tests.test_vertex import _JOB
from tests.test_vertex import _FakeVertex
from tests.test_vertex import fixture_fake_vertex  # noqa: F401 (a fixture)


def _follow(fake_vertex, monkeypatch, capsys, states):
  """Runs `ctl-vertex --submit --wait` against the fake Vertex AI, whose job
  goes through `states`; returns the exit code, stdout and stderr."""
  monkeypatch.setattr(_FakeVertex, "states", list(states))
  monkeypatch.setattr(vertex, "client_for", lambda region: fake_vertex)
  exit_code = vertex.main(
    [
      f"--image={_IMAGE}",
      "--scheduling_strategy=SPOT",
      "--submit",
      "--wait",
      "--project=p",
      "--region=r",
      "--poll_secs=0",
    ]
  )
  out, err = capsys.readouterr()
  return exit_code, out, err


def test_wait_follows_a_succeeded_job_to_exit_0(
  fake_vertex, monkeypatch, capsys
):
  monkeypatch.setattr(
    _FakeVertex, "web_access_uris", {"workerpool0-0": "https://shell.example"}
  )
  exit_code, out, err = _follow(
    fake_vertex,
    monkeypatch,
    capsys,
    [
      "JOB_STATE_QUEUED",
      "JOB_STATE_QUEUED",
      "JOB_STATE_PENDING",
      "UNAVAILABLE",  # A read that fails for now is tried again.
      "JOB_STATE_RUNNING",
      "JOB_STATE_RUNNING",
      "JOB_STATE_SUCCEEDED",
    ],
  )

  assert exit_code == 0, err
  assert out == f"{_JOB}\n"
  states = [
    line.split(": ")[1] for line in err.splitlines() if _JOB + ": " in line
  ]
  assert states == [
    "JOB_STATE_QUEUED",
    "JOB_STATE_PENDING",
    "JOB_STATE_RUNNING",
    "JOB_STATE_SUCCEEDED",
  ]
  assert "Logs: gcloud ai custom-jobs stream-logs 123 --region=r" in err
  assert err.count("Web access, workerpool0-0: https://shell.example") == 1
  assert f"Reading {_JOB} failed (Try later); trying again." in err
  reads = [path for path, body in _FakeVertex.requests if body is None]
  assert len(reads) == 7


@pytest.mark.parametrize(
  "state, words",
  [
    (
      "JOB_STATE_FAILED",
      f"error: job {_JOB} failed: The replica workerpool0-0 exited with a "
      "non-zero status of 143.",
    ),
    ("JOB_STATE_CANCELLED", f"error: job {_JOB} cancelled."),
    ("JOB_STATE_EXPIRED", f"error: job {_JOB} expired."),
  ],
)
def test_wait_ends_non_zero_with_the_error_of_a_job_that_did_not_succeed(
  fake_vertex, monkeypatch, capsys, state, words
):
  monkeypatch.setattr(
    _FakeVertex,
    "error",
    {
      "code": 3,
      "message": "The replica workerpool0-0 exited with a non-zero status of "
      "143.",
    },
  )

  exit_code, _, err = _follow(
    fake_vertex, monkeypatch, capsys, ["JOB_STATE_RUNNING", state]
  )

  assert exit_code == vertex_follow.FAILED_EXIT_CODE
  assert err.splitlines()[-1] == words


def _interrupt(secs):
  del secs
  raise KeyboardInterrupt


@pytest.mark.parametrize("cancel", [False, True])
def test_ctrl_c_leaves_the_job_running_and_says_so_or_cancels_it(
  fake_vertex, monkeypatch, cancel
):
  monkeypatch.setattr(_FakeVertex, "states", ["JOB_STATE_RUNNING"])
  out = io.StringIO()

  exit_code = vertex_follow.follow(
    _JOB,
    client=fake_vertex,
    cancel_on_interrupt=cancel,
    out=out,
    sleep=_interrupt,
  )

  assert exit_code == vertex_follow.INTERRUPTED_EXIT_CODE
  last = out.getvalue().splitlines()[-1]
  cancels = [path for path, _ in _FakeVertex.requests if ":cancel" in path]
  state = fake_vertex.get_custom_job(name=_JOB).state.name
  if cancel:
    assert last == f"Asked Vertex AI to cancel {_JOB}."
    assert cancels == [f"/v1/{_JOB}:cancel"]
    assert state == "JOB_STATE_CANCELLING"
  else:
    assert last.startswith(f"Stopped following; {_JOB} is still running.")
    assert "gcloud ai custom-jobs cancel 123 --region=r --project=p" in last
    assert (cancels, state) == ([], "JOB_STATE_RUNNING")


def test_a_job_vertex_does_not_show_is_a_user_error(fake_vertex):
  with pytest.raises(errors.UserError) as raised:
    vertex_follow.follow(
      "projects/p/locations/r/customJobs/999",
      client=fake_vertex,
      out=io.StringIO(),
    )

  assert str(raised.value) == (
    "Vertex AI does not show job projects/p/locations/r/customJobs/999: "
    "No such job."
  )


def _client_without_a_network(case: str):
  """A real client of Vertex AI with nothing at the other end (port 9:
  what a machine that lost its route gets, refused at once): over gRPC, over
  REST, and with a token to refresh at an unreachable token server."""
  from google.auth import credentials  # pylint: disable=g-import-not-at-top
  from google.cloud import aiplatform_v1  # pylint: disable=g-import-not-at-top
  from google.oauth2 import credentials as oauth2  # pylint: disable=g-import-not-at-top

  transport = "grpc" if case == "grpc" else "rest"
  scheme = "http://" if transport == "rest" else ""
  return aiplatform_v1.JobServiceClient(
    credentials=oauth2.Credentials(
      token=None,
      refresh_token="refresh",
      token_uri="http://127.0.0.1:9/token",
      client_id="id",
      client_secret="secret",
    )
    if case == "token"
    else credentials.AnonymousCredentials(),
    transport=transport,
    client_options={"api_endpoint": f"{scheme}127.0.0.1:9"},
  )


@pytest.mark.parametrize("case", ["grpc", "rest", "token"])
def test_a_network_lost_while_following_is_one_line_a_read(case):
  """--wait on a machine that lost the network (or cannot refresh its
  token) says so in one line a read and tries again at the next poll, as
  for a read Vertex AI answered with 503; the job runs on, Ctrl-C stops
  the following (was a traceback for every transport but gRPC's)."""
  polls = []

  def sleep(secs):
    polls.append(secs)
    if len(polls) == 2:
      raise KeyboardInterrupt

  out = io.StringIO()
  exit_code = vertex_follow.follow(
    _JOB, client=_client_without_a_network(case), out=out, sleep=sleep
  )

  assert exit_code == vertex_follow.INTERRUPTED_EXIT_CODE
  lines = out.getvalue().splitlines()
  tries = [line for line in lines if line.startswith(f"Reading {_JOB} failed")]
  assert len(tries) == 2, lines
  assert all(line.endswith("; trying again.") for line in tries), tries
  assert all("\n" not in line and len(line) < 400 for line in tries), tries
