"""ctl.checkpoint.tiers.node_tiers: where a node's tiers live, and the
removal of the tiers of runs that are gone (real processes)."""

import glob
import os
import signal
import subprocess
import sys

import pytest

from ctl.checkpoint.tiers import local_tier
from ctl.checkpoint.tiers import node_tiers
from tests.conftest import FAST_FLAGS
from tests.tier_checkpoints import checkpoint_of
from trainer.testing import finish
from trainer.testing import launch_command
from trainer.testing import start_until_step


def _open(root, *, job_id: str, checkpoint_dir: str) -> local_tier.LocalTier:
  """A start on the node: worker 0's tier of `job_id` under `root`."""
  return node_tiers.open_tier(
    str(root),
    job_id=job_id,
    checkpoint_dir=checkpoint_dir,
    rank=0,
    need_bytes=0,
    keep_in_bucket=2,
    environ={},
  )


def test_a_start_removes_the_snapshots_a_killed_copy_left(tmp_path):
  tier = _open(tmp_path / "root", job_id="job", checkpoint_dir="/bucket")
  tier.save(checkpoint_of(5), 5)
  left = tier.snapshot(5)  # The copy to the bucket was killed mid-way.
  again = _open(tmp_path / "root", job_id="job", checkpoint_dir="/bucket")
  assert again.steps() == [5]
  assert not os.path.exists(left)


def test_a_tier_belongs_to_the_directory_not_to_its_spelling(
  tmp_path, monkeypatch
):
  # Two runs of one job id, each `--model_dir=run` from its own working
  # directory: two run directories, so two tiers (one shared tier let run A
  # restore a step run B had written, and end with B's weights).
  root = tmp_path / "root"
  tiers = []
  for where in ("a", "b"):
    (tmp_path / where).mkdir()
    monkeypatch.chdir(tmp_path / where)
    tiers.append(_open(root, job_id="job", checkpoint_dir="run/checkpoints"))
  assert tiers[0].directory != tiers[1].directory
  # One directory however it is spelled: the same tier (a restart finds it).
  spellings = (
    "run/checkpoints",
    "./run/checkpoints/",
    str(tmp_path / "b/run/checkpoints"),
  )
  assert {
    _open(root, job_id="job", checkpoint_dir=s).directory for s in spellings
  } == {tiers[1].directory}


@pytest.mark.processes
def test_the_tiers_of_job_less_runs_that_are_gone_are_removed(tmp_path):
  gone = subprocess.Popen([sys.executable, "-c", "pass"])
  gone.wait()
  for pid in (gone.pid, os.getpid()):
    (tmp_path / f"pid{pid}-0123abcd" / "worker-0").mkdir(parents=True)
  (tmp_path / "job-0123abcd").mkdir()  # A job's: kept for its restart.
  node_tiers.remove_stale(str(tmp_path))
  assert sorted(os.listdir(tmp_path)) == [
    "job-0123abcd",
    f"pid{os.getpid()}-0123abcd",
  ]


def _open_other_job(root) -> local_tier.LocalTier:
  """The next start on the node: another job's tier under `root`."""
  return _open(root, job_id="next", checkpoint_dir="/elsewhere")


@pytest.mark.processes
def test_the_tier_of_a_launcher_stopped_by_ctrl_c_is_removed_next(tmp_path):
  """Ctrl-C on ctl-launch ends its job, whose id nothing finds again: the
  next start on the node removes its tier (its launcher and worker are
  gone), while a tier whose launcher runs is kept."""
  root, events = tmp_path / "root", str(tmp_path / "events.jsonl")
  launcher = start_until_step(
    launch_command(
      "--num_workers=1",
      "--max_restarts=0",
      trainer_flags=(
        *FAST_FLAGS,
        "--train_steps=100000",
        f"--model_dir={tmp_path / 'run'}",
        f"--local_checkpoints={root}",
      ),
    ),
    events=events,
    step=20,
  )
  try:
    (theirs,) = glob.glob(f"{root}/ctl-tier-*/*/worker-0")
    _open_other_job(root)
    assert os.path.isdir(theirs)  # Its launcher runs.
    launcher.send_signal(signal.SIGINT)
    code, output = finish(launcher)
    assert code == 130, output[-3000:]
  finally:
    if launcher.poll() is None:
      launcher.kill()
  assert os.path.isdir(theirs)  # Left, as before: nothing else ran yet.
  _open_other_job(root)
  assert not os.path.exists(os.path.dirname(theirs))
