"""ctl.checkpoint.tiers.bucket_tier: a local step copied into the bucket,
by the chief or a node agent, through the one fenced commit."""

import os

import pytest
import tensorflow as tf

import ctl
from ctl.checkpoint import checkpointing
from ctl.checkpoint.tiers import bucket_tier
from ctl.checkpoint.tiers import local_tier
from ctl.checkpoint.tiers import node_tiers
from ctl.checkpoint.tiers import peer_tier
from ctl.io import checkpoint_state
from ctl.io import mirror
from ctl.io import storage
from tests.tier_checkpoints import checkpoint_of
from tests.tier_checkpoints import cut_short


def test_a_copy_to_the_bucket_is_what_a_checkpointer_restores(tmp_path):
  tier = local_tier.LocalTier(str(tmp_path / "tier"))
  bucket = str(tmp_path / "bucket")
  for step in (10, 20, 30):
    tier.save(checkpoint_of(step), step)
    snapshot = tier.snapshot(step)
    bucket_tier.copy_to_bucket(snapshot, step=step, bucket_dir=bucket, keep=2)
  assert bucket_tier.newest_in_bucket(bucket) == 30
  assert sorted(os.listdir(bucket)) == [
    "checkpoint",
    "ckpt-20.data-00000-of-00001",
    "ckpt-20.index",
    "ckpt-30.data-00000-of-00001",
    "ckpt-30.index",
  ]
  restored = checkpoint_of(0)
  checkpointer = checkpointing.Checkpointer(
    checkpoint=restored, directory=bucket, is_chief=True, keep=2
  )
  assert checkpointer.restore_latest() == os.path.join(bucket, "ckpt-30")
  assert restored.weights.numpy()[0] == 30


def test_an_agent_persists_only_a_step_newer_than_the_buckets(tmp_path):
  tier = local_tier.LocalTier(str(tmp_path / "tier"))
  bucket = str(tmp_path / "bucket")
  pointer = {"directory": tier.directory, "bucket_dir": bucket, "keep": 3}
  tier.save(checkpoint_of(10), 10)
  assert bucket_tier.persist_newest(pointer) == 10
  assert bucket_tier.persist_newest(pointer) is None  # The bucket has it.
  tier.save(checkpoint_of(15), 15)
  cut_short(tier, 15)
  assert bucket_tier.persist_newest(pointer) is None  # Cut short: not copied.
  assert bucket_tier.newest_in_bucket(bucket) == 10


@pytest.mark.processes
def test_a_stale_agent_cannot_change_the_buckets_state_file(
  lease_holder, tmp_path
):
  """Every write of the bucket's state file is fenced: the node agent of a
  job that no longer holds the run directory (another job took its lease
  over, at the next generation) persists nothing of its dead worker's newer
  step, and the state file stays as the holder left it."""
  model_dir = str(tmp_path / "run")
  bucket = os.path.join(model_dir, "checkpoints")
  tier = local_tier.LocalTier(str(tmp_path / "tier"))
  tier.save(checkpoint_of(10), 10)
  bucket_tier.copy_to_bucket(
    tier.snapshot(10), step=10, bucket_dir=bucket, keep=3
  )
  tier.save(checkpoint_of(20), 20)  # Newer than the bucket's: worth a copy.
  service = peer_tier.TierService()
  node_tiers.write_pointer(
    service.pointer,
    directory=tier.directory,
    bucket_dir=bucket,
    keep=3,
    lease={"model_dir": model_dir, "job": "old"},
  )
  lease_holder(model_dir, job="new")
  with open(os.path.join(bucket, "checkpoint"), "rb") as f:
    before = f.read()
  service.persist()  # As after its worker died.
  service.close(remove_tier=False)
  with open(os.path.join(bucket, "checkpoint"), "rb") as f:
    assert f.read() == before
  assert not tf.io.gfile.glob(os.path.join(bucket, "ckpt-20*"))
  assert bucket_tier.newest_in_bucket(bucket) == 10


def _saved_tier(tmp_path, *steps) -> local_tier.LocalTier:
  tier = local_tier.LocalTier(str(tmp_path / "tier"))
  for step in steps:
    tier.save(checkpoint_of(step), step)
  return tier


@pytest.mark.processes
def test_an_agent_persists_into_cloud_storage_as_the_run_reaches_it(
  gcs_emulator, tmp_path
):
  """A node agent given the run's gs:// url copies its dead worker's step
  through the run's route (gcsfs, the default), not TensorFlow's own gs://
  filesystem, and a restart reading the bucket restores it."""
  url = f"gs://{gcs_emulator.BUCKET}/run"
  tier = _saved_tier(tmp_path, 10)
  pointer = {
    "directory": tier.directory,
    "bucket_dir": f"{url}/checkpoints",
    "keep": 3,
    "lease": {"model_dir": url, "job": "job", "storage_route": "gcsfs"},
  }
  assert bucket_tier.persist_newest(pointer) == 10
  location = storage.open_location(
    f"{url}/checkpoints", storage="gcsfs", staging_dir=str(tmp_path / "read")
  )
  location.fetch()
  restored = checkpoint_of(0)
  checkpointer = checkpointing.Checkpointer(
    checkpoint=restored, directory=location.local_path, is_chief=True, keep=3
  )
  assert checkpointer.restore_latest().endswith("ckpt-10")
  assert restored.weights.numpy()[0] == 10


@pytest.mark.processes
def test_a_stale_agent_cannot_change_the_state_file_in_cloud_storage(
  gcs_emulator, lease_holder, tmp_path
):
  """As the test above on gs://: another job holds the run directory's
  lease, so the old job's agent writes nothing; the state object keeps its
  generation."""
  url = f"gs://{gcs_emulator.BUCKET}/run"
  fs = gcs_emulator.filesystem()
  tier = _saved_tier(tmp_path, 10)
  bucket_tier.copy_to_bucket(
    tier.snapshot(10),
    step=10,
    bucket_dir=f"{url}/checkpoints",
    keep=3,
    storage_route="gcsfs",
  )
  state = f"{gcs_emulator.BUCKET}/run/checkpoints/checkpoint"
  generation = mirror.object_generation(fs, state)
  tier.save(checkpoint_of(20), 20)
  lease_holder(url, job="new")
  pointer = {
    "directory": tier.directory,
    "bucket_dir": f"{url}/checkpoints",
    "keep": 3,
    "lease": {"model_dir": url, "job": "old", "storage_route": "gcsfs"},
  }
  with pytest.raises(ctl.LeaseLost):
    bucket_tier.persist_newest(pointer)
  assert mirror.object_generation(fs, state) == generation
  assert not fs.glob(f"{gcs_emulator.BUCKET}/run/checkpoints/ckpt-20*")


@pytest.mark.processes
def test_two_writers_of_the_state_file_lose_neither_step(
  gcs_emulator, tmp_path
):
  """The chief's copy and a node agent's persist commit the same state
  object at once: the one whose read went stale (the other's commit landed
  between its read and its write) merges again, so the state lists both
  steps. Without the generation precondition the later write drops the
  other's step."""
  bucket = f"gs://{gcs_emulator.BUCKET}/run/checkpoints"
  root = f"{gcs_emulator.BUCKET}/run/checkpoints"
  fs = gcs_emulator.filesystem()
  tier = _saved_tier(tmp_path, 10, 20)
  for step in (10, 20):
    tier.snapshot(step)
  bucket_tier.copy_to_bucket(
    tier.snapshot(10), step=10, bucket_dir=bucket, keep=5, storage_route="gcsfs"
  )
  seen = []

  def add_step_30(listed):
    if not seen:  # The agent's copy of step 20 lands after this read.
      bucket_tier.copy_to_bucket(
        tier.snapshot(20),
        step=20,
        bucket_dir=bucket,
        keep=5,
        storage_route="gcsfs",
      )
    seen.append([os.path.basename(p) for p in listed])
    return [*listed, f"{root}/ckpt-30"]

  checkpointing.commit_state(root, add_step_30, fs=fs)
  assert seen == [["ckpt-10"], ["ckpt-10", "ckpt-20"]]
  listed = checkpointing.listed(root, fs)
  assert [os.path.basename(p) for p in listed] == [
    "ckpt-10",
    "ckpt-20",
    "ckpt-30",
  ]


def _chief_saved_10(url, tmp_path):
  """(the chief's storage location, its Checkpointer), step 10 published to
  `url` through gcsfs."""
  location = storage.open_location(
    url, storage="gcsfs", staging_dir=str(tmp_path / "chief")
  )
  location.fetch()
  chief = checkpointing.Checkpointer(
    checkpoint=checkpoint_of(10),
    directory=location.local_path,
    is_chief=True,
    keep=3,
  )
  chief.save(10)
  location.publish(commit_file=checkpointing.STATE_FILE)
  return location, chief


@pytest.mark.processes
def test_the_chiefs_next_publish_follows_its_agents_persist(
  gcs_emulator, tmp_path
):
  """A node agent persists its dead worker's step into the bucket while the
  chief's mirror still holds the state object's older generation: the
  chief, still the lease holder, publishes its next save over it (its
  manager owns the listing) instead of stopping as if taken over (exit 77),
  and the agent's step, which its listing drops, leaves no files behind."""
  url = f"gs://{gcs_emulator.BUCKET}/run/checkpoints"
  root = f"{gcs_emulator.BUCKET}/run/checkpoints"
  fs = gcs_emulator.filesystem()
  location, chief = _chief_saved_10(url, tmp_path)
  tier = _saved_tier(tmp_path, 15)
  pointer = {
    "directory": tier.directory,
    "bucket_dir": url,
    "keep": 3,
    "lease": {"model_dir": f"gs://{gcs_emulator.BUCKET}/run", "job": "job"},
  }
  assert bucket_tier.persist_newest(pointer) == 15
  chief.save(20)
  location.publish(commit_file=checkpointing.STATE_FILE)
  listed = checkpointing.listed(root, fs)
  assert [os.path.basename(p) for p in listed] == ["ckpt-10", "ckpt-20"]
  assert not fs.glob(f"{root}/ckpt-15*")


@pytest.mark.processes
def test_a_commit_on_gcs_keeps_the_save_times_the_state_file_lists(
  gcs_emulator, tmp_path
):
  """The conditional commit of an agent's persist carries the save time
  the chief's manager stamped on each checkpoint it keeps listing, instead
  of stamping them all with the commit's time."""
  url = f"gs://{gcs_emulator.BUCKET}/run/checkpoints"
  root = f"{gcs_emulator.BUCKET}/run/checkpoints"
  fs = gcs_emulator.filesystem()
  _chief_saved_10(url, tmp_path)
  saved = checkpoint_state.parse(fs.cat_file(f"{root}/checkpoint")).stamps
  tier = _saved_tier(tmp_path, 15)
  pointer = {"directory": tier.directory, "bucket_dir": url, "keep": 3}
  assert bucket_tier.persist_newest(pointer) == 15
  after = checkpoint_state.parse(fs.cat_file(f"{root}/checkpoint"))
  assert after.names == ("ckpt-10", "ckpt-15")
  assert after.stamps["ckpt-10"] == saved["ckpt-10"]


@pytest.mark.usefixtures("storage_not_answering")
def test_an_agent_cut_off_from_the_bucket_gives_up_its_persist_in_a_bound(
  tmp_path,
):
  """A node agent whose node cannot reach the bucket (a partition: the
  connection refused or never answered) says so within its bound instead of
  riding gcsfs's retries for most of a minute at every failure (the cluster
  check's partition_permanent: the cut node's agent exited 93 s late); the
  step stays in the node's tier, the bucket untouched."""
  tier = _saved_tier(tmp_path, 10)
  url = "gs://cut-off-bucket/run"
  pointer = {
    "directory": tier.directory,
    "bucket_dir": f"{url}/checkpoints",
    "keep": 3,
    "lease": {"model_dir": url, "job": "job", "storage_route": "gcsfs"},
  }
  with pytest.raises(bucket_tier.BucketUnreachable) as raised:
    bucket_tier.persist_newest(pointer)
  assert str(raised.value) == (
    f"the bucket did not answer within 2 s ({url}/checkpoints); "
    "the local checkpoint of step 10 stays in this node's tier."
  )
  assert tier.steps() == [10]
