"""scripts/wheel_names.py: a wheel's generic top-level names fail the check
(`make wheel-check` runs it on the built wheel)."""

import os
import sys
import zipfile

import pytest

from trainer.testing import REPO
from trainer.testing import run_command

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

_SCRIPT = os.path.join(REPO, "scripts", "wheel_names.py")


def _wheel(tmp_path, top_level: str, record: list[str]) -> str:
  path = str(tmp_path / "x-1.0-py3-none-any.whl")
  with zipfile.ZipFile(path, "w") as archive:
    archive.writestr("x-1.0.dist-info/top_level.txt", top_level)
    archive.writestr("x-1.0.dist-info/RECORD", "\n".join(record) + "\n")
  return path


@pytest.mark.parametrize(
  "top_level,record",
  [
    ("ctl\ntrainer\n", ["ctl/__init__.py,sha256=a,1"]),
    ("ctl\n", ["ctl/__init__.py,sha256=a,1", "trainer/task.py,sha256=b,2"]),
  ],
  ids=["top_level.txt", "RECORD"],
)
def test_a_wheel_with_a_trainer_package_fails_naming_it(
  tmp_path, top_level, record
):
  result = run_command(
    [sys.executable, _SCRIPT, _wheel(tmp_path, top_level, record)],
    check=False,
  )
  assert result.returncode == 1
  assert result.stderr.strip() == (
    "error: the wheel installs generic top-level names ['trainer']."
  )


def test_distinct_names_pass_and_are_listed(tmp_path):
  wheel = _wheel(
    tmp_path,
    "ctl\nctl_trainer\n",
    [
      "ctl/__init__.py,sha256=a,1",
      "ctl_trainer/task.py,sha256=b,2",
      "x-1.0.dist-info/RECORD,,",
      "x-1.0.data/scripts/y,sha256=c,3",
    ],
  )
  result = run_command([sys.executable, _SCRIPT, wheel])
  assert result.stdout.split() == ["top-level", "names:", "ctl", "ctl_trainer"]


def test_a_path_that_is_not_a_wheel_is_one_sentence_and_exit_2(tmp_path):
  result = run_command(
    [sys.executable, _SCRIPT, str(tmp_path / "none.whl")], check=False
  )
  assert result.returncode == 2
  assert result.stderr.count("\n") == 1 and result.stderr.startswith("error:")
