"""ctl.io.fencing: the fence every commit point checks, against real lease
files and the GCS emulator.

A writer that lost the run directory's lease commits nothing more: its
fence raises `LeaseLost` naming what it was about to commit, and on gs://
a writer taken over right after its check still cannot replace the new
holder's checkpoint state file (the object generation precondition).
"""

import os

import pytest

import ctl
from ctl.io import fencing
from ctl.io import storage
from ctl.resilience import lease


def _take(model_dir: str, *, take_over: bool = False) -> lease.Lease:
  return lease.acquire(
    model_dir=model_dir,
    job="",
    stale_secs=60.0,
    take_over=take_over,
    storage_route="gcsfs",
  )


def test_the_open_fence_passes_whatever_is_committed():
  assert fencing.OPEN.check("the checkpoint of step 40") is None
  assert lease.fence_of(None) is fencing.OPEN


def test_a_held_leases_fence_passes_until_another_trainer_takes_it(tmp_path):
  old = _take(str(tmp_path))
  fence = lease.fence_of(old)
  fence.check("the checkpoint of step 10")
  new = _take(str(tmp_path), take_over=True)
  try:
    with pytest.raises(
      ctl.LeaseLost, match="the checkpoint of step 20"
    ) as lost:
      fence.check("the checkpoint of step 20")
    assert lost.value.exit_code == ctl.LEASE_LOST_EXIT_CODE
    new.fence().check("the checkpoint of step 20")
  finally:
    new.release()
    old.release()


class _TakenOverRightAfterTheCheck(fencing.Fence):
  """The old holder's fence: it passes, then the new holder moves in."""

  def __init__(self, fence):
    self._fence = fence
    self.then = None  # Called once, right after the next check.

  def check(self, what):
    self._fence.check(what)
    then, self.then = self.then, None
    if then:
      then()


@pytest.mark.processes
def test_a_stale_writers_state_file_commit_is_refused_by_its_generation(
  gcs_emulator, tmp_path
):
  url = f"gs://{gcs_emulator.BUCKET}/run"
  state_file = f"{gcs_emulator.BUCKET}/run/checkpoints/checkpoint"
  fs = gcs_emulator.filesystem()

  def writer(name, fence):
    location = storage.open_location(
      f"{url}/checkpoints",
      storage="gcsfs",
      staging_dir=str(tmp_path / name),
      fence=fence,
    )
    location.fetch()
    return location

  def commit(location, text):
    with open(os.path.join(location.local_path, "checkpoint"), "w") as f:
      f.write(f'model_checkpoint_path: "{text}"\n')
    location.publish(commit_file="checkpoint")

  old_lease = _take(url)
  leases, new = [old_lease], []

  def move_in():
    leases.append(_take(url, take_over=True))
    new.append(writer("new", leases[-1].fence()))
    commit(new[0], "ckpt-20")

  race = _TakenOverRightAfterTheCheck(old_lease.fence())
  old = writer("old", race)
  commit(old, "ckpt-10")
  race.then = move_in  # The next commit's check passes, then it is taken.
  try:
    with pytest.raises(ctl.LeaseLost, match="lost the lease on"):
      commit(old, "ckpt-30")
    assert b"ckpt-20" in fs.cat_file(state_file)
  finally:  # No renewal thread outlives the emulator.
    for held in reversed(leases):
      held.release()
