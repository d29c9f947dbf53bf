"""ctl.env: the CTL_* variables a worker is told, read and checked in one place."""

import pytest

from ctl import env
from ctl.errors import UserError


def test_unset_and_empty_variables_read_as_not_given():
  for environ in ({}, {env.RESTART_COUNT: " ", env.PREVIOUS_EXIT: ""}):
    assert env.restart_count(environ) == 0
    assert env.previous_exit(environ) is None
    assert env.previous_exit_time(environ) is None
    assert env.attempt_start(environ) is None
    assert env.faults(environ) == ""
    assert not env.faults_enabled(environ)
    env.check(environ)


def test_values_are_parsed():
  environ = {
    env.RESTART_COUNT: "2",
    env.PREVIOUS_EXIT: "-9",
    env.PREVIOUS_EXIT_TIME: "1795661707.322",
    env.ATTEMPT_START: "1795661710.5",
  }
  assert env.restart_count(environ) == 2
  assert env.previous_exit(environ) == -9  # SIGKILL.
  assert env.previous_exit_time(environ) == 1795661707.322
  assert env.attempt_start(environ) == 1795661710.5


@pytest.mark.parametrize(
  "name, value",
  [
    (env.RESTART_COUNT, "-1"),
    (env.RESTART_COUNT, "two"),
    (env.PREVIOUS_EXIT, "1.5"),
    (env.PREVIOUS_EXIT_TIME, "nan"),
    (env.ATTEMPT_START, "-3"),
    (env.FAULTS_ENABLED, "yes"),
  ],
)
def test_a_bad_value_is_one_sentence_naming_the_variable(name, value):
  with pytest.raises(UserError) as raised:
    env.check({name: value})
  message = str(raised.value)
  assert message.startswith(f"{name} must be") and message.endswith(
    f"not {value!r}."
  ), message


def test_the_job_id_is_ctls_else_vertex_ais():
  assert env.job_id({env.VERTEX_JOB_ID: "vertex-1"}) == "vertex-1"
  assert env.job_id({env.JOB_ID: "ctl-1", env.VERTEX_JOB_ID: "v"}) == "ctl-1"
  assert env.job_id({}) == ""


def test_faults_act_only_with_the_second_switch():
  # A CTL_FAULTS left in a shell must not break a real job.
  assert not env.faults_enabled({env.FAULTS: "crash@50"})
  environ = env.faults_environment("crash@50")
  assert env.faults(environ) == "crash@50" and env.faults_enabled(environ)
