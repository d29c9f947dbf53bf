"""ctl.io.tempdirs: private temporary directories, stale ones of dead processes
removed."""

import os
import stat
import subprocess
import sys
import tempfile

import pytest

from ctl.errors import UserError
from ctl.io import tempdirs


@pytest.fixture
def tmp(tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  return tmp_path


def _dead_pid() -> int:
  """The pid of a process that has ended."""
  dead = subprocess.run(
    [sys.executable, "-c", "import os; print(os.getpid())"],
    capture_output=True,
    text=True,
    check=True,
  )
  return int(dead.stdout)


def _mode(path):
  return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.processes
def test_scratch_dirs_of_dead_processes_are_removed(tmp):
  stale = tmp / f"ctl_worker_checkpoint_{_dead_pid()}_abc"
  (stale / "sub").mkdir(parents=True)
  live = tmp / f"ctl_worker_checkpoint_{os.getppid()}_def"
  live.mkdir()
  other = tmp / "ctl_worker_checkpoint_unrelated"
  other.mkdir()
  made = tempdirs.scratch_dir("ctl_worker_checkpoint_")
  assert os.path.basename(made).startswith(
    f"ctl_worker_checkpoint_{os.getpid()}_"
  )
  assert _mode(made) == 0o700
  assert not stale.exists()
  assert live.exists() and other.exists()


@pytest.mark.processes
def test_a_stale_dir_another_process_removes_first_is_no_error(
  tmp, monkeypatch
):
  # Two agents starting at once both sweep a killed one's scratch dir; the
  # one that lists it second found it gone and its file service failed to
  # start ("No such file or directory"), so a replaced node's worker could
  # not fetch its peer's newer step (test_checkpoint_tiers, 1 run in 3).
  stale = tmp / f"ctl_tier_agent_{_dead_pid()}_abc"
  stale.mkdir()
  listdir = os.listdir

  def listed_then_removed_by_the_other(path):
    names = listdir(path)
    stale.rmdir()  # The other agent's sweep, between our list and look.
    return names

  monkeypatch.setattr(tempdirs.os, "listdir", listed_then_removed_by_the_other)
  made = tempdirs.scratch_dir("ctl_tier_agent_")
  assert os.path.isdir(made) and not stale.exists()


def test_private_root_is_made_0700_and_reused(tmp):
  root = tempdirs.private_root("ctl-staging")
  assert root == str(tmp / f"ctl-staging-{os.getuid()}")
  assert _mode(root) == 0o700
  assert tempdirs.private_root("ctl-staging") == root


@pytest.mark.parametrize("kind", ["symlink", "open_to_others", "file"])
def test_a_root_that_is_not_private_is_refused(tmp, kind):
  root = tmp / f"ctl-staging-{os.getuid()}"
  elsewhere = tmp / "elsewhere"
  elsewhere.mkdir(mode=0o700)
  if kind == "symlink":
    root.symlink_to(elsewhere)
  elif kind == "open_to_others":
    root.mkdir()
    root.chmod(0o777)
  else:
    root.write_text("")
  with pytest.raises(UserError, match="not a private directory"):
    tempdirs.private_root("ctl-staging")
  assert os.listdir(elsewhere) == []
