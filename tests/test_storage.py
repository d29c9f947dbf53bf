"""Tests for ctl.io.storage against a real emulator process and a stand-in mount.

gcsfs routes talk to gcp-storage-emulator over HTTP (see
ctl/testing/gcs_emulator.py); the fuse route's mount is a local directory, as
Cloud Storage FUSE presents one. Checkpoints are real
`tf.train.CheckpointManager` checkpoints of a variable whose value is the step
it was saved at.
"""

import concurrent.futures
import errno
import os
import posixpath
import stat
import tempfile

from fsspec.implementations import local as fsspec_local
import pytest
import tensorflow as tf

from ctl.errors import UserError
from ctl.io import mirror
from ctl.io import retry
from ctl.io import storage

# Give up quickly while the emulator is down; attempts on a dead server are
# cut off after 2 s (gcsfs alone would keep retrying for about 30 s).
_IMPATIENT = retry.RetryPolicy(
  deadline_s=3.0,
  initial_backoff_s=0.2,
  max_backoff_s=1.0,
  attempt_timeout_s=2.0,
)
# Outlast an emulator restart.
_PATIENT = retry.RetryPolicy(
  deadline_s=60.0,
  initial_backoff_s=0.2,
  max_backoff_s=1.0,
  attempt_timeout_s=2.0,
)


def _save(directory: str, *, step: int) -> None:
  """Saves checkpoint ckpt-STEP holding STEP; the manager keeps only it."""
  checkpoint = tf.train.Checkpoint(value=tf.Variable(float(step)))
  tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1).save(
    checkpoint_number=step
  )


def _restore(directory: str) -> float:
  """Restores the latest checkpoint in `directory` and returns its value."""
  value = tf.Variable(0.0)
  checkpoint = tf.train.Checkpoint(value=value)
  latest = tf.train.CheckpointManager(
    checkpoint, directory, max_to_keep=1
  ).latest_checkpoint
  checkpoint.restore(latest).assert_consumed()
  return float(value.numpy())


def _open(tmp_path, name: str, url: str, **kwargs) -> storage.Location:
  """Opens `url` with tmp_path/NAME as the staging directory."""
  return storage.open_location(url, staging_dir=str(tmp_path / name), **kwargs)


def _files(*steps: int) -> list[str]:
  """The files of a checkpoint directory that keeps `steps`, sorted."""
  return sorted(
    [
      "checkpoint",
      *(f"ckpt-{step}.index" for step in steps),
      *(f"ckpt-{step}.data-00000-of-00001" for step in steps),
    ]
  )


def _fetch_and_restore(location: storage.Location) -> float:
  """Fetches `location`, then restores its latest checkpoint's value."""
  location.fetch()
  return _restore(location.local_path)


def _open_bucket(emulator, tmp_path, name: str, **kwargs) -> storage.Location:
  """Opens gs://BUCKET/run on the emulator through gcsfs."""
  return _open(
    tmp_path, name, f"gs://{emulator.BUCKET}/run", storage="gcsfs", **kwargs
  )


def _remote_names(emulator) -> set[str]:
  return {
    os.path.basename(path)
    for path in emulator.filesystem().find(f"{emulator.BUCKET}/run")
  }


def test_local_path_is_used_as_is(tmp_path):
  location = storage.open_location(str(tmp_path / "run"))
  assert location.local_path == str(tmp_path / "run")
  location.fetch()
  location.publish(commit_file="checkpoint")
  location.close()
  assert not os.path.exists(tmp_path / "run")


def test_tf_route_hands_tensorflow_the_gs_url(monkeypatch):
  # A Cloud Storage host that resolves (offline, the check of
  # test_a_host_name_that_does_not_resolve_fails_at_once comes first).
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://localhost:9")
  assert (
    storage.open_location("/gcs/bkt/p/", storage="tf").local_path
    == "gs://bkt/p"
  )
  assert (
    storage.open_location("gs://bkt/p", storage="tf").local_path == "gs://bkt/p"
  )


def test_unknown_storage_is_a_user_error():
  with pytest.raises(UserError, match="storage must be one of"):
    storage.open_location("gs://bkt/p", storage="s3")


@pytest.mark.processes
def test_gcsfs_checkpoint_round_trip(gcs_emulator, tmp_path):
  writer = _open_bucket(gcs_emulator, tmp_path, "writer")
  writer.fetch()  # A new run: nothing to fetch.
  assert not os.listdir(writer.local_path)
  _save(writer.local_path, step=1)
  writer.publish(commit_file="checkpoint")
  writer.close()
  assert _remote_names(gcs_emulator) == set(_files(1))

  reader = _open_bucket(gcs_emulator, tmp_path, "reader")
  assert _fetch_and_restore(reader) == 1.0


@pytest.mark.processes
def test_state_file_is_the_commit_point(gcs_emulator, tmp_path):
  writer = _open_bucket(
    gcs_emulator, tmp_path, "writer", retry_policy=_IMPATIENT
  )
  _save(writer.local_path, step=1)
  writer.publish(commit_file="checkpoint")
  # The server dies when the new state file arrives, after the data files.
  gcs_emulator.restart(exit_on_upload="run/checkpoint")
  _save(writer.local_path, step=2)  # The manager sweeps ckpt-1 locally.
  with pytest.raises(OSError):
    writer.publish(commit_file="checkpoint")
  gcs_emulator.wait_until_exited()
  gcs_emulator.start()

  # ckpt-2 is up but not committed, and ckpt-1 was not deleted.
  assert _remote_names(gcs_emulator) == set(_files(1, 2))
  reader = _open_bucket(gcs_emulator, tmp_path, "reader")
  assert _fetch_and_restore(reader) == 1.0
  reader.close()

  writer.publish()  # The commit file is remembered.
  assert _remote_names(gcs_emulator) == set(_files(2))
  reader = _open_bucket(gcs_emulator, tmp_path, "reader")
  reader.fetch()
  assert sorted(os.listdir(reader.local_path)) == _files(2)
  assert _restore(reader.local_path) == 2.0


@pytest.mark.processes
def test_publish_retries_across_a_restart(gcs_emulator, tmp_path):
  writer = _open_bucket(gcs_emulator, tmp_path, "writer", retry_policy=_PATIENT)
  _save(writer.local_path, step=1)
  gcs_emulator.restart(exit_on_upload=".data-00000-of-00001")
  with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
    publishing = executor.submit(writer.publish, commit_file="checkpoint")
    gcs_emulator.wait_until_exited()
    gcs_emulator.start()
    publishing.result()

  reader = _open_bucket(gcs_emulator, tmp_path, "reader")
  assert _fetch_and_restore(reader) == 1.0


@pytest.mark.parametrize(
  "route, refusal",
  [
    ({"storage": "gcsfs"}, "Cannot write to gs://no-such-bucket/"),
    ({"storage": "fuse"}, "not a directory"),
  ],
  ids=["gcsfs", "fuse"],
)
@pytest.mark.processes
def test_missing_bucket_fails_before_anything_is_written(
  route, refusal, request, tmp_path
):
  # gcsfs: the emulator runs, without the bucket; FUSE: nothing is mounted.
  if route["storage"] == "gcsfs":
    request.getfixturevalue("gcs_emulator")
  with pytest.raises(UserError, match=refusal):
    _open(
      tmp_path,
      "writer",
      "gs://no-such-bucket/run",
      fuse_root=str(tmp_path / "gcs"),
      retry_policy=_IMPATIENT,
      **route,
    )
  assert not os.path.exists(tmp_path / "writer")


def test_auto_uses_a_mounted_bucket(tmp_path):
  fuse_root = tmp_path / "gcs"
  mount = fuse_root / "bucket"
  mount.mkdir(parents=True)
  writer = _open(
    tmp_path, "writer", "gs://bucket/run", fuse_root=str(fuse_root)
  )
  _save(writer.local_path, step=1)
  writer.publish(commit_file="checkpoint")
  _save(writer.local_path, step=2)
  writer.close()  # The last publish keeps "checkpoint" as its commit file.
  assert sorted(os.listdir(mount / "run")) == _files(2)

  # A path under the mount is the same bucket object path.
  reader = _open(
    tmp_path, "reader", str(mount / "run"), fuse_root=str(fuse_root)
  )
  assert _fetch_and_restore(reader) == 2.0


def test_default_staging_dir_is_found_again_and_cleaned(tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  fuse_root = tmp_path / "gcs"
  (fuse_root / "bucket").mkdir(parents=True)
  first = storage.open_location("gs://bucket/run", fuse_root=str(fuse_root))
  _save(first.local_path, step=1)
  first.publish(commit_file="checkpoint")
  first.close()
  # A process that saves ckpt-2 and dies before publishing it.
  _save(first.local_path, step=2)

  again = storage.open_location(
    f"{fuse_root}/bucket/run/", fuse_root=str(fuse_root)
  )
  assert again.local_path == first.local_path
  again.fetch()
  assert sorted(os.listdir(again.local_path)) == _files(1)
  assert _restore(again.local_path) == 1.0
  again.close()


def test_default_staging_dir_is_private_and_removed_on_close(
  tmp_path, monkeypatch
):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  fuse_root = tmp_path / "gcs"
  (fuse_root / "bucket").mkdir(parents=True)
  location = storage.open_location("gs://bucket/run", fuse_root=str(fuse_root))
  root = tmp_path / f"ctl-staging-{os.getuid()}"
  assert os.path.dirname(location.local_path) == str(root)
  lock = location.local_path + ".lock"
  assert [
    stat.S_IMODE(os.stat(path).st_mode)
    for path in (root, location.local_path, lock)
  ] == [0o700, 0o700, 0o600]
  _save(location.local_path, step=1)
  location.publish(commit_file="checkpoint")
  location.close()
  assert os.listdir(root) == []
  assert "checkpoint" in os.listdir(fuse_root / "bucket" / "run")


def test_a_planted_lock_link_is_not_followed(tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  fuse_root = tmp_path / "gcs"
  (fuse_root / "bucket").mkdir(parents=True)
  first = storage.open_location("gs://bucket/run", fuse_root=str(fuse_root))
  lock = first.local_path + ".lock"
  first.close()
  target = tmp_path / "target"
  target.write_text("precious")
  os.symlink(target, lock)
  with pytest.raises(UserError, match="cannot be opened"):
    storage.open_location("gs://bucket/run", fuse_root=str(fuse_root))
  assert target.read_text() == "precious"


class _FailingMount(fsspec_local.LocalFileSystem):
  """A FUSE mount whose writes of the state file fail, as on a backend error."""

  def put_file(self, lpath, rpath, **kwargs):
    if posixpath.basename(lpath) == "checkpoint":
      raise OSError(errno.EIO, "Input/output error", rpath)
    return super().put_file(lpath, rpath, **kwargs)


def test_fuse_commit_point(tmp_path):
  fuse_root = tmp_path / "gcs"
  remote = fuse_root / "bucket" / "run"
  remote.mkdir(parents=True)
  writer = _open(
    tmp_path, "staging", "gs://bucket/run", fuse_root=str(fuse_root)
  )
  _save(writer.local_path, step=1)
  writer.publish(commit_file="checkpoint")
  writer.close()

  failing = mirror.Mirror(
    fs=_FailingMount(auto_mkdir=True),
    remote_dir=str(remote),
    url="gs://bucket/run",
    local_dir=writer.local_path,
    retry_policy=retry.RetryPolicy(),
    is_transient=lambda error: False,
  )
  failing.fetch()
  _save(writer.local_path, step=2)
  with pytest.raises(OSError, match="Input/output error"):
    failing.publish(commit_file="checkpoint")
  assert sorted(os.listdir(remote)) == _files(1, 2)
  with pytest.raises(OSError, match="Input/output error"):
    failing.close()  # Fails again, and releases the staging directory.

  # A restart in the same staging directory drops the uncommitted ckpt-2.
  again = _open(
    tmp_path, "staging", "gs://bucket/run", fuse_root=str(fuse_root)
  )
  again.fetch()
  assert sorted(os.listdir(again.local_path)) == _files(1)
  assert _restore(again.local_path) == 1.0
  again.close()


def test_growing_event_file_is_uploaded_again(tmp_path):
  fuse_root = tmp_path / "gcs"
  (fuse_root / "bucket").mkdir(parents=True)
  location = _open(
    tmp_path, "staging", "gs://bucket/run/tensorboard", fuse_root=str(fuse_root)
  )
  writer = tf.summary.create_file_writer(
    os.path.join(location.local_path, "train")
  )
  for step in (1, 2):
    with writer.as_default():
      tf.summary.scalar("loss", 1.0 / step, step=step)
    writer.flush()
    location.publish()
  writer.close()
  location.close()

  remote_train = fuse_root / "bucket" / "run" / "tensorboard" / "train"
  (events_file,) = os.listdir(remote_train)
  steps = [
    tf.compat.v1.Event.FromString(record.numpy()).step
    for record in tf.data.TFRecordDataset(str(remote_train / events_file))
  ]
  assert steps[1:] == [1, 2]  # After the file version record.


def test_staging_dir_is_used_by_one_process_at_a_time(tmp_path):
  fuse_root = tmp_path / "gcs"
  (fuse_root / "bucket").mkdir(parents=True)
  first = _open(
    tmp_path, "staging", "gs://bucket/run", fuse_root=str(fuse_root)
  )
  with pytest.raises(UserError, match="in use by another process"):
    _open(tmp_path, "staging", "gs://bucket/run", fuse_root=str(fuse_root))
  first.close()


def test_a_default_staging_dir_in_use_gives_this_process_its_own(
  tmp_path, monkeypatch
):
  """A trainer taking over a live holder's run on the same host (a paused
  holder, `--take_over_lease`) found the url's default staging directory
  locked and exited 2 after taking the lease: the lease, not the staging
  directory, says who writes; a staging directory only has to be private."""
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
  (tmp_path / "tmp").mkdir()
  fuse_root = tmp_path / "gcs"
  (fuse_root / "bucket").mkdir(parents=True)
  url = "gs://bucket/run"
  holder = storage.open_location(url, fuse_root=str(fuse_root))
  taker = storage.open_location(url, fuse_root=str(fuse_root))
  assert taker.local_path != holder.local_path
  for location in (holder, taker):
    with open(os.path.join(location.local_path, "checkpoint"), "w") as f:
      f.write(f'model_checkpoint_path: "{id(location)}"\n')
    location.publish(commit_file="checkpoint")
  with open(fuse_root / "bucket" / "run" / "checkpoint") as f:
    assert str(id(taker)) in f.read()  # The later publish: the taker's.
  taker.close()
  holder.close()
  assert not os.listdir(tmp_path / "tmp" / f"ctl-staging-{os.getuid()}")


@pytest.mark.parametrize(
  "content",
  [b"not a state", b"\x00\xff binary", b""],
  ids=["text", "binary", "empty"],
)
def test_unparsable_remote_state_is_a_user_error(tmp_path, content):
  fuse_root = tmp_path / "gcs"
  (fuse_root / "bucket" / "run").mkdir(parents=True)
  (fuse_root / "bucket" / "run" / "checkpoint").write_bytes(content)
  location = _open(
    tmp_path, "staging", "gs://bucket/run", fuse_root=str(fuse_root)
  )
  with pytest.raises(UserError, match="cannot be parsed"):
    location.fetch()


@pytest.mark.parametrize("route", ["gcsfs", "tf"])
def test_a_host_name_that_does_not_resolve_fails_at_once(
  tmp_path, monkeypatch, route
):
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://no-such-host.invalid:9")
  with pytest.raises(
    UserError, match="no-such-host.invalid does not resolve"
  ) as error:
    _open(tmp_path, "staging", "gs://test-bucket/run", storage=route)
  assert "\n" not in str(error.value)
  assert not os.path.exists(tmp_path / "staging")
