"""The local checkpoint tier, its copy to the bucket, and the peer service.

Real files, a real `tf.train.Checkpoint`, a real HTTP service on loopback.
"""

import glob
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from ctl.checkpoint import checkpoint_tiers
from ctl.checkpoint import checkpointing
from ctl.checkpoint import local_tier
from ctl.checkpoint import tier_restore
from ctl.launch import tier_service
from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import trainer_env
from trainer.testing import finish
from trainer.testing import launch_command
from trainer.testing import start_until_step


def _checkpoint(value: float) -> tf.train.Checkpoint:
  return tf.train.Checkpoint(weights=tf.Variable(np.full(1000, value)))


def _value(prefix: str) -> float:
  return float(
    tf.train.load_checkpoint(prefix).get_tensor(
      "weights/.ATTRIBUTES/VARIABLE_VALUE"
    )[0]
  )


def _cut_short(tier: local_tier.LocalTier, step: int) -> None:
  (data,) = tf.io.gfile.glob(tier.prefix(step) + ".data-*")
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)


def test_the_tier_keeps_the_newest_complete_steps(tmp_path):
  tier = local_tier.LocalTier(str(tmp_path / "worker-0"), keep=2)
  for step in (5, 10, 15):
    tier.save(_checkpoint(step), step)
  assert tier.steps() == [10, 15]
  assert not tf.io.gfile.glob(tier.prefix(5) + "*")  # Removed, not only hidden.
  _cut_short(tier, 15)
  assert tier.steps() == [10]
  assert _value(tier.prefix(10)) == 10


def test_a_save_that_died_before_its_commit_is_not_listed(tmp_path):
  tier = local_tier.LocalTier(str(tmp_path / "worker-0"))
  tier.save(_checkpoint(5), 5)
  # The files of step 10 written, the state file not (killed in between).
  _checkpoint(10).write(tier.prefix(10))
  assert tier.steps() == [5]
  tier.save(_checkpoint(15), 15)  # The strays go with the next commit.
  assert tier.steps() == [5, 15]
  assert not tf.io.gfile.glob(tier.prefix(10) + "*")


def _tiered(checkpoint, tmp_path):
  """(a chief's TieredCheckpointer of `checkpoint`, its tier, its bucket
  directory), two steps kept in each."""
  bucket_dir = str(tmp_path / "bucket")
  tier = local_tier.LocalTier(str(tmp_path / "worker-0"))
  tiered = checkpoint_tiers.TieredCheckpointer(
    bucket=checkpointing.Checkpointer(
      checkpoint=checkpoint, directory=bucket_dir, is_chief=True, keep=2
    ),
    tier=tier,
    keep=2,
    is_chief=True,
    on_saved=lambda: None,
    agreement=None,
  )
  return tiered, tier, bucket_dir


def test_a_local_save_holds_its_steps_values_while_training_goes_on(tmp_path):
  """The tiered save writes in the background: the step goes on as soon as
  the variables are snapshotted, and an update made then (in place, as an
  optimizer's) must not reach the files of the step saved, in the local
  tier or in its copy to the bucket."""
  weights = tf.Variable(np.full(2_000_000, 5.0))  # 16 MB: a write that lasts.
  tiered, tier, bucket_dir = _tiered(
    tf.train.Checkpoint(weights=weights), tmp_path
  )
  for step in (5, 10):
    tiered.save(step, to_bucket=step == 5)
    weights.assign_add(np.full(2_000_000, 1000.0))
  tiered.sync()
  assert tier.steps() == [5, 10]
  assert _value(tier.prefix(5)) == 5.0 and _value(tier.prefix(10)) == 1005.0
  assert _value(tf.train.latest_checkpoint(bucket_dir)) == 5.0
  tiered.close()


def _records(prefix: str) -> dict:
  """The records a checkpoint holds beside its state (the weights and
  TensorFlow's own count of saves by one object): {key: value}."""
  reader = tf.train.load_checkpoint(prefix)
  return {
    key: np.asarray(reader.get_tensor(key)).tolist()  # Text is bytes.
    for key in reader.get_variable_to_shape_map()
    if not key.startswith(("weights/", "save_counter/", "_CHECKPOINTABLE"))
  }


def test_a_local_save_holds_the_records_a_bucket_save_holds(tmp_path):
  """The local tier writes asynchronously, and TensorFlow's asynchronous
  write saves only what the `tf.train.Checkpoint` was made with: the records
  a `Checkpointer` keeps must be in it too, in the local file and its copy
  in the bucket, or a restore could not check them."""
  bucket = checkpointing.Checkpointer(
    checkpoint=_checkpoint(1.0),
    directory=str(tmp_path / "bucket"),
    is_chief=True,
    keep=3,
    element_spec="(float32[8,8,3], int64[])",
    global_batch_size=64,
  )
  tier = local_tier.LocalTier(str(tmp_path / "worker-0"))
  tiered = checkpoint_tiers.TieredCheckpointer(
    bucket=bucket,
    tier=tier,
    keep=3,
    is_chief=True,
    on_saved=lambda: None,
    agreement=None,
  )
  bucket.save(5)
  tiered.save(10)
  tiered.sync()
  expected = _records(os.path.join(bucket.directory, "ckpt-5"))
  assert {
    "element_spec/.ATTRIBUTES/VARIABLE_VALUE": b"(float32[8,8,3], int64[])"
  }.items() <= (expected.items())
  assert _records(tier.prefix(10)) == expected
  assert _records(os.path.join(bucket.directory, "ckpt-10")) == expected
  tiered.close()


def test_a_copy_to_the_bucket_is_what_a_checkpointer_restores(tmp_path):
  tier = local_tier.LocalTier(str(tmp_path / "tier"))
  bucket = str(tmp_path / "bucket")
  for step in (10, 20, 30):
    tier.save(_checkpoint(step), step)
    snapshot = tier.snapshot(step)
    local_tier.copy_to_bucket(snapshot, step=step, bucket_dir=bucket, keep=2)
  assert local_tier.newest_in_bucket(bucket) == 30
  assert sorted(os.listdir(bucket)) == [
    "checkpoint",
    "ckpt-20.data-00000-of-00001",
    "ckpt-20.index",
    "ckpt-30.data-00000-of-00001",
    "ckpt-30.index",
  ]
  restored = _checkpoint(0)
  checkpointer = checkpointing.Checkpointer(
    checkpoint=restored, directory=bucket, is_chief=True, keep=2
  )
  assert checkpointer.restore_latest() == os.path.join(bucket, "ckpt-30")
  assert restored.weights.numpy()[0] == 30


def test_an_agent_persists_only_a_step_newer_than_the_buckets(tmp_path):
  tier = local_tier.LocalTier(str(tmp_path / "tier"))
  bucket = str(tmp_path / "bucket")
  pointer = {"directory": tier.directory, "bucket_dir": bucket, "keep": 3}
  tier.save(_checkpoint(10), 10)
  assert local_tier.persist_newest(pointer) == 10
  assert local_tier.persist_newest(pointer) is None  # The bucket has it.
  tier.save(_checkpoint(15), 15)
  _cut_short(tier, 15)
  assert local_tier.persist_newest(pointer) is None  # Cut short: not copied.
  assert local_tier.newest_in_bucket(bucket) == 10


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
  tier.save(_checkpoint(10), 10)
  local_tier.copy_to_bucket(
    tier.snapshot(10), step=10, bucket_dir=bucket, keep=3
  )
  tier.save(_checkpoint(20), 20)  # Newer than the bucket's: worth a copy.
  service = tier_service.TierService()
  local_tier.write_pointer(
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
  assert local_tier.newest_in_bucket(bucket) == 10


@pytest.fixture
def service():
  served = tier_service.TierService()
  yield served
  served.close(remove_tier=True)


def test_a_peer_fetches_a_step_from_the_service(service, tmp_path):
  theirs = local_tier.LocalTier(str(tmp_path / "node1"))
  local_tier.write_pointer(
    service.pointer, directory=theirs.directory, bucket_dir="", keep=2
  )
  theirs.save(_checkpoint(20), 20)
  mine = local_tier.LocalTier(str(tmp_path / "node0"))
  address = f"127.0.0.1:{service.port}"
  assert tier_restore.fetch_from_peer(mine, 20, address=address)
  assert mine.steps() == [20] and _value(mine.prefix(20)) == 20
  assert not tier_restore.fetch_from_peer(mine, 25, address=address)
  _cut_short(theirs, 20)
  assert not tier_restore.fetch_from_peer(
    local_tier.LocalTier(str(tmp_path / "node2")), 20, address=address
  )


def test_the_service_serves_nothing_outside_the_tier(service, tmp_path):
  tier = local_tier.LocalTier(str(tmp_path / "tier"))
  local_tier.write_pointer(
    service.pointer, directory=tier.directory, bucket_dir="", keep=2
  )
  (tmp_path / "secret").write_text("no")
  for name in ("../secret", "%2e%2e/secret", "secret", ""):
    with pytest.raises(OSError, match="404"):
      tier_restore._open(f"http://127.0.0.1:{service.port}/{name}")


def _restore_into(checkpoint):
  def restore(prefix):
    checkpoint.read(prefix).assert_existing_objects_matched()
    return True

  return restore


def test_one_worker_restores_its_local_step_before_the_buckets(tmp_path):
  tier = local_tier.LocalTier(str(tmp_path / "tier"))
  bucket = str(tmp_path / "bucket")
  tier.save(_checkpoint(10), 10)
  local_tier.copy_to_bucket(tier.directory, step=10, bucket_dir=bucket, keep=2)
  tier.save(_checkpoint(15), 15)
  restored = _checkpoint(0)
  kwargs = dict(
    bucket_dir=bucket,
    hosts=["localhost"],
    service_port=0,
    gather=lambda row: np.asarray([row], dtype=float),
    restore=_restore_into(restored),
  )
  result = tier_restore.restore_agreed(tier=tier, **kwargs)
  assert (result.step, result.tier) == (15, "local")
  assert restored.weights.numpy()[0] == 15
  _cut_short(tier, 15)
  tier.remove()  # And the tier wiped: the bucket's step.
  result = tier_restore.restore_agreed(
    tier=local_tier.LocalTier(tier.directory), **kwargs
  )
  assert (result.step, result.tier) == (10, "bucket")
  assert restored.weights.numpy()[0] == 10


def test_the_launcher_and_its_tier_service_import_no_tensorflow():
  """The launcher and node agent start in a fraction of a second: TensorFlow
  loads only when an agent persists a step (a worker died)."""
  result = subprocess.run(
    [
      sys.executable,
      "-c",
      "import sys; import ctl.launch.launcher;"
      " print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))",
    ],
    capture_output=True,
    text=True,
    check=True,
    cwd=REPO,
    env=trainer_env(),
  )
  assert result.stdout.strip() == "[]"


def test_a_start_removes_the_snapshots_a_killed_copy_left(tmp_path):
  def open_tier():
    return local_tier.open_tier(
      str(tmp_path / "root"),
      job_id="job",
      checkpoint_dir="/bucket",
      rank=0,
      need_bytes=0,
      keep_in_bucket=2,
      environ={},
    )

  tier = open_tier()
  tier.save(_checkpoint(5), 5)
  left = tier.snapshot(5)  # The copy to the bucket was killed mid-way.
  assert open_tier().steps() == [5]
  assert not os.path.exists(left)


def test_the_tiers_of_job_less_runs_that_are_gone_are_removed(tmp_path):
  gone = subprocess.Popen([sys.executable, "-c", "pass"])
  gone.wait()
  for pid in (gone.pid, os.getpid()):
    (tmp_path / f"pid{pid}-0123abcd" / "worker-0").mkdir(parents=True)
  (tmp_path / "job-0123abcd").mkdir()  # A job's: kept for its restart.
  local_tier.remove_stale(str(tmp_path))
  assert sorted(os.listdir(tmp_path)) == [
    "job-0123abcd",
    f"pid{os.getpid()}-0123abcd",
  ]


def _open_other_job(root) -> local_tier.LocalTier:
  """The next start on the node: another job's tier under `root`."""
  return local_tier.open_tier(
    str(root),
    job_id="next",
    checkpoint_dir="/elsewhere",
    rank=0,
    need_bytes=0,
    keep_in_bucket=2,
    environ={},
  )


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


def test_the_last_worker_to_remove_its_tier_removes_the_runs_directory(
  tmp_path,
):
  run = tmp_path / "ctl-tier-0" / "job-0123456789ab"
  tiers = [local_tier.LocalTier(str(run / f"worker-{r}")) for r in (0, 1)]
  tiers[0].remove()
  assert os.listdir(run) == ["worker-1"]
  tiers[1].remove()
  assert os.listdir(tmp_path / "ctl-tier-0") == []


def _save_counter(prefix: str) -> int:
  return int(
    tf.train.load_checkpoint(prefix).get_tensor(
      "save_counter/.ATTRIBUTES/VARIABLE_VALUE"
    )
  )


def test_local_saves_count_as_saves_as_bucket_saves_do(tmp_path):
  """TensorFlow's `save_counter` counts a checkpoint's saves; a local save
  (a `write`, which does not count) left it 0 in the tier and its copy."""
  tiered, tier, bucket_dir = _tiered(_checkpoint(5.0), tmp_path)
  for step in (5, 10):
    tiered.save(step, to_bucket=step == 5)
  tiered.sync()
  tiered.close()
  assert _save_counter(tier.prefix(5)) == 1
  assert _save_counter(tier.prefix(10)) == 2
  assert _save_counter(os.path.join(bucket_dir, "ckpt-5")) == 1


def test_a_step_removed_while_a_reader_checks_it_is_skipped(
  tmp_path, monkeypatch
):
  """A reader (the agent, a peer, a test) lists the tier while its worker
  removes an old step: a file seen by `exists` is gone by `getsize` (a
  FileNotFoundError failed test_checkpoint_tiers in `make test`). The race
  is made certain here by a file that `exists` still reports."""
  tier = local_tier.LocalTier(str(tmp_path / "worker-0"), keep=2)
  for step in (5, 10):
    tier.save(_checkpoint(step), step)
  (data,) = tf.io.gfile.glob(tier.prefix(5) + ".data-*")
  os.remove(data)
  monkeypatch.setattr(local_tier.os.path, "exists", lambda path: True)
  assert tier.steps() == [10]
