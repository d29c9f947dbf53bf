"""ctl.env: the CTL_* variables a worker is told, read and checked in one place."""

import logging
import time

import pytest

from ctl import env
from ctl.errors import UserError
from ctl.telemetry import ledger_reader
from trainer.testing import FAST_FLAGS
from trainer.testing import run_trainer
from trainer.testing import trainer_env


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
    env.ATTEMPT_START: f"{time.time():.3f}",  # Handed now: it can be true.
  }
  assert env.restart_count(environ) == 2
  assert env.previous_exit(environ) == -9  # SIGKILL.
  assert env.previous_exit_time(environ) == 1795661707.322
  assert env.attempt_start(environ) == float(environ[env.ATTEMPT_START])


@pytest.mark.parametrize(
  "name, seconds_from_now, why",
  [
    (env.ATTEMPT_START, None, "before this process started"),  # At 1 s.
    (env.ATTEMPT_START, 3600, "after now"),
    (env.PREVIOUS_EXIT_TIME, 3600, "after now"),
  ],
)
def test_a_handed_time_that_cannot_be_true_is_one_warning_and_ignored(
  name, seconds_from_now, why, caplog, monkeypatch
):
  monkeypatch.setattr(env, "_warned", set())
  value = (
    "1" if seconds_from_now is None else f"{time.time() + seconds_from_now:.3f}"
  )
  with caplog.at_level(logging.WARNING, logger=env.__name__):
    env.check({name: value})  # Well formed: no error.
    read = (
      env.attempt_start
      if name == env.ATTEMPT_START
      else (env.previous_exit_time)
    )
    assert read({name: value}) is None
  warnings = [r.getMessage() for r in caplog.records]
  assert len(warnings) == 1, warnings
  assert warnings[0].startswith(f"{name}={float(value)!r} ")
  assert f"is {why}, which cannot be true" in warnings[0]


@pytest.mark.processes
def test_a_trainer_handed_an_attempt_start_left_in_a_shell_ignores_it(
  tmp_path,
):
  """CTL_ATTEMPT_START=1 left in a shell: the ledger's attempt began at the
  epoch and the summary said "Goodput 0.0% of 1795792340.4 s" for 20
  steps. Now one warning, and the attempt begins with the process."""
  model_dir = str(tmp_path / "run")
  launched = time.time()
  result = run_trainer(
    *FAST_FLAGS,
    "--train_steps=20",
    f"--model_dir={model_dir}",
    env=trainer_env(**{env.ATTEMPT_START: "1"}),
  )
  assert result.stderr.count(f"{env.ATTEMPT_START}=1.0 ") == 1, result.stderr
  [attempt] = ledger_reader.read(ledger_reader.ledger_dir(model_dir))
  assert attempt[0]["event"] == "start"
  assert attempt[0]["time"] >= launched - 1  # Not 1.0: the process start.


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


def test_faults_act_only_with_the_second_switch():
  # A CTL_FAULTS left in a shell must not break a real job.
  assert not env.faults_enabled({env.FAULTS: "crash@50"})
  environ = env.faults_environment("crash@50")
  assert env.faults(environ) == "crash@50" and env.faults_enabled(environ)


def test_an_events_file_that_cannot_be_opened_is_one_sentence(tmp_path):
  """CTL_EVENTS in a missing directory (or naming a directory) was a
  FileNotFoundError traceback when `ctl.run` opened it; now one sentence
  from the check every entry point makes before training."""
  for path in (str(tmp_path / "missing" / "events.jsonl"), str(tmp_path)):
    with pytest.raises(UserError) as raised:
      env.check({env.EVENTS: path})
    message = str(raised.value)
    assert message.startswith(f"{env.EVENTS} must be") and message.endswith(
      f"not {path!r}."
    ), message
  path = str(tmp_path / "events.jsonl")  # A new file in a directory: fine.
  env.check({env.EVENTS: path})
  assert env.events_path({env.EVENTS: path}) == path


def test_a_blank_job_id_is_unset():
  assert env.job_id({env.JOB_ID: " \t"}) == ""
  assert env.job_id({}) == ""
  assert env.job_id({env.JOB_ID: " job-7\n"}) == "job-7"
