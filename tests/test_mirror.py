"""ctl.io.mirror: read-only mode, and a publish that replaces a whole.

The publishing side (commit order, retries, deletions) is tested through
ctl.io.storage in test_storage.py, against a real emulator and a FUSE root.
"""

import os
import subprocess
import sys

from fsspec.implementations import local as fsspec_local
import pytest

from ctl.io import mirror
from ctl.io import retry


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


class _UploadFails(fsspec_local.LocalFileSystem):
  """A remote whose uploads of one file fail, as if the process died there."""

  fail_on = None

  def put_file(self, lpath, rpath, **kwargs):
    if self.fail_on and lpath.endswith(self.fail_on):
      raise OSError("the upload died here")
    return super().put_file(lpath, rpath, **kwargs)


def test_a_replacing_publish_withdraws_the_commit_before_it_uploads(tmp_path):
  remote, local = tmp_path / "remote", tmp_path / "local"
  remote.mkdir()
  fs = _UploadFails(auto_mkdir=True)
  chief = mirror.Mirror(
    fs=fs,
    remote_dir=str(remote),
    url=str(remote),
    local_dir=str(local),
    retry_policy=retry.RetryPolicy(deadline_s=1.0),
    is_transient=lambda error: False,
  )
  for name in ("a.pb", "b.pb", "marker"):
    (local / name).write_text("old")
  chief.publish(commit_file="marker", replaces=True)
  assert (remote / "marker").read_text() == "old"

  for name in ("a.pb", "b.pb", "marker"):
    (local / name).write_text("new!")
  fs.fail_on = "b.pb"
  try:
    chief.publish(commit_file="marker", replaces=True)
  except OSError:
    pass
  # a.pb is new, b.pb old: no marker vouches for that mix.
  assert (remote / "a.pb").read_text() == "new!"
  assert not (remote / "marker").exists()

  fs.fail_on = None
  chief.publish(commit_file="marker", replaces=True)
  chief.close()
  assert {p.name: p.read_text() for p in remote.iterdir()} == {
    "a.pb": "new!",
    "b.pb": "new!",
    "marker": "new!",
  }


_PUBLISHER = """
import itertools, sys
from fsspec.implementations import local as fsspec_local
from ctl.io import mirror, retry
remote, local, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = mirror.Mirror(fs=fsspec_local.LocalFileSystem(auto_mkdir=True),
                  remote_dir=remote, url=remote, local_dir=local,
                  retry_policy=retry.RetryPolicy(deadline_s=1.0),
                  is_transient=lambda error: False)
with open(local + "/events", "wb") as f:
  f.write(b"a" * size)
m.publish()
print("published", flush=True)
sys.stdin.readline()
for letter in itertools.cycle(b"bc"):  # The same file, grown, again and
  with open(local + "/events", "wb") as f:  # again, as TensorBoard's grows.
    f.write(bytes([letter]) * 2 * size)
  m.publish()
"""


@pytest.mark.processes
def test_a_kill_while_a_published_file_is_replaced_keeps_the_old_whole(
  tmp_path,
):
  # A local (or FUSE-mounted) remote shows a file while it is written: a
  # SIGKILL in the middle of re-publishing a grown TensorBoard events file
  # left it cut short, and the steps published before were lost.
  remote, local, size = tmp_path / "remote", tmp_path / "local", 64 << 20
  remote.mkdir()
  publisher = subprocess.Popen(
    [sys.executable, "-c", _PUBLISHER, str(remote), str(local), str(size)],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    text=True,
  )
  try:
    assert publisher.stdout.readline() == "published\n"
    publisher.stdin.write("go\n")
    publisher.stdin.flush()
    while not any(  # A copy in progress: some remote file is partial.
      0 < entry.stat().st_size < 2 * size and entry.stat().st_size != size
      for entry in os.scandir(remote)
    ):
      assert publisher.poll() is None
    publisher.kill()
  finally:
    publisher.kill()
    publisher.wait()
    publisher.stdin.close()
    publisher.stdout.close()
  with open(remote / "events", "rb") as f:
    content = f.read()
  # The old whole, or one of the new wholes: never a file cut short.
  assert len(content) in (size, 2 * size), f"{len(content)} bytes: cut short"
  assert content == content[:1] * len(content)
