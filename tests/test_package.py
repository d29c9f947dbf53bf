"""The package's public face: what `import ctl` gives, and what it costs."""

import subprocess
import sys

import pytest

import ctl
from ctl import controller
from ctl import errors
from ctl import options
from trainer.testing import run_command


def _run_logging_imports(*args: str) -> subprocess.CompletedProcess:
  """Runs a fresh Python with -X importtime: stderr logs every import."""
  return run_command(
    [sys.executable, "-X", "importtime", *args], timeout=120, check=False
  )


def test_what_a_user_calls_is_on_the_package():
  assert ctl.run is controller.run
  assert ctl.Task is options.Task and ctl.RunOptions is options.RunOptions
  for name in (
    "UserError",
    "Preempted",
    "TrainingDiverged",
    "USER_ERROR_EXIT_CODE",
    "PREEMPTED_EXIT_CODE",
  ):
    assert getattr(ctl, name) is getattr(errors, name)
  assert set(ctl.__all__) <= set(dir(ctl))
  with pytest.raises(AttributeError, match="no attribute 'Trainer'"):
    ctl.Trainer  # noqa: B018  # pylint: disable=pointless-statement


def test_every_exception_is_in_the_errors_module():
  for error in (ctl.UserError, ctl.Preempted, ctl.TrainingDiverged):
    assert error.__module__ == "ctl.errors"


@pytest.mark.parametrize(
  "args,says",
  [
    (("-c", "import ctl; print(ctl.UserError.__name__)"), "UserError"),
    (("-m", "trainer.task", "--help"), "--train_steps"),
    (("-m", "ctl.launch", "--help"), "--num_workers"),
  ],
  ids=["import ctl", "trainer --help", "launch --help"],
)
def test_light_entry_points_do_not_load_tensorflow(args, says):
  result = _run_logging_imports(*args)
  assert says in result.stdout, result.stderr[-3000:]
  assert "import time:" in result.stderr  # The import log is there.
  assert "tensorflow" not in result.stderr
