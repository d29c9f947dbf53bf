"""ctl.mirror read-only mode: a non-chief or evaluator only ever reads.

The publishing side (commit order, retries, deletions) is tested through
ctl.storage in test_storage.py, against a real emulator and a FUSE root.
"""

import os

from fsspec.implementations import local as fsspec_local

from ctl import mirror
from ctl import retry


def _mirror(remote, local, *, read_only):
  return mirror.Mirror(
    fs=fsspec_local.LocalFileSystem(auto_mkdir=True),
    remote_dir=str(remote),
    url=str(remote),
    local_dir=str(local),
    retry_policy=retry.RetryPolicy(deadline_s=1.0),
    is_transient=lambda error: False,
    read_only=read_only,
  )


def test_read_only_mirror_fetches_publishes_nothing_and_cleans_up(tmp_path):
  remote, chief_dir, reader_dir = (
    tmp_path / "remote",
    tmp_path / "chief",
    tmp_path / "reader",
  )
  remote.mkdir()
  chief = _mirror(remote, chief_dir, read_only=False)
  (chief_dir / "ckpt-5.index").write_bytes(b"index")
  (chief_dir / "ckpt-5.data-00000-of-00001").write_bytes(b"data")
  (chief_dir / mirror.STATE_FILE).write_bytes(
    b'model_checkpoint_path: "ckpt-5"\nall_model_checkpoint_paths: "ckpt-5"\n'
  )
  chief.publish(commit_file=mirror.STATE_FILE)
  chief.close()
  before = sorted(os.listdir(remote))

  reader = _mirror(remote, reader_dir, read_only=True)
  reader.fetch()
  assert sorted(os.listdir(reader_dir)) == before
  (reader_dir / "stray.txt").write_text("not for the bucket")
  os.remove(reader_dir / "ckpt-5.index")
  reader.publish(commit_file=mirror.STATE_FILE)
  reader.close()

  assert sorted(os.listdir(remote)) == before  # Nothing added or deleted.
  assert not os.path.exists(reader_dir)  # Its private staging is gone.
  assert not os.path.exists(str(reader_dir) + ".lock")
