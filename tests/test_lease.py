"""ctl.lease against real holder processes, real files and the GCS emulator."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ctl import lease
from tests.conftest import REPO
from tests.conftest import trainer_env

_HOLD = """
import sys
from ctl import lease
held = lease.acquire(model_dir=sys.argv[1], job=sys.argv[2],
                     stale_secs=float(sys.argv[3]), storage_route="gcsfs")
print("held", flush=True)
sys.stdin.read()
held.release()
"""


@pytest.fixture
def holder():
  """Starts a process that holds the lease on a directory until stdin ends."""
  procs = []

  def start(model_dir, *, job="", stale_secs=60.0):
    proc = subprocess.Popen(
      [sys.executable, "-c", _HOLD, model_dir, job, str(stale_secs)],
      cwd=REPO,
      env=trainer_env(),
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      text=True,
    )
    procs.append(proc)
    assert proc.stdout.readline() == "held\n"
    return proc

  yield start
  for proc in procs:
    if proc.poll() is None:
      proc.send_signal(signal.SIGCONT)
      proc.kill()
    proc.wait()


def _take(model_dir, **kwargs):
  return lease.acquire(
    model_dir=model_dir,
    job=kwargs.pop("job", ""),
    stale_secs=kwargs.pop("stale_secs", 60.0),
    storage_route="gcsfs",
    **kwargs,
  )


def _record(model_dir):
  with open(os.path.join(model_dir, lease.LEASE_FILE)) as f:
    return json.load(f)


def test_a_live_holder_refuses_a_second_writer_naming_itself(holder, tmp_path):
  proc = holder(str(tmp_path))
  with pytest.raises(lease.LeaseHeld) as refused:
    _take(str(tmp_path))
  message = str(refused.value)
  assert f"pid {proc.pid} on " in message
  assert "--take_over_lease" in message
  assert _record(tmp_path)["pid"] == proc.pid


def test_release_removes_the_lease_and_a_new_writer_takes_it(tmp_path):
  first = _take(str(tmp_path))
  assert _record(tmp_path)["pid"] == os.getpid()
  first.release()
  first.release()  # Idempotent: every exit path may call it.
  assert not (tmp_path / lease.LEASE_FILE).exists()
  with _take(str(tmp_path)) as second:
    assert second.holder.pid == os.getpid()


def test_a_fresh_directory_made_for_the_lease_is_removed_with_it(tmp_path):
  fresh = tmp_path / "fresh"
  _take(str(fresh)).release()
  assert not fresh.exists()


def test_a_sigkilled_holder_on_this_host_is_reclaimed_at_once(holder, tmp_path):
  proc = holder(str(tmp_path), stale_secs=3600)
  proc.kill()
  proc.wait()
  with _take(str(tmp_path), stale_secs=3600) as taken:
    assert _record(tmp_path)["pid"] == os.getpid() == taken.holder.pid


def test_a_restart_of_the_same_job_takes_its_own_lease(holder, tmp_path):
  holder(str(tmp_path), job="job-7", stale_secs=3600)  # Alive, not stale.
  with pytest.raises(lease.LeaseHeld):  # Another job is refused.
    _take(str(tmp_path), job="job-8", stale_secs=3600)
  with _take(str(tmp_path), job="job-7", stale_secs=3600):
    assert _record(tmp_path)["pid"] == os.getpid()


def test_a_stale_lease_is_taken_over_and_its_old_holder_keeps_off(
  holder, tmp_path
):
  proc = holder(str(tmp_path), stale_secs=1.0)
  proc.send_signal(signal.SIGSTOP)  # Alive, but renews no more.
  time.sleep(2.0)
  taken = _take(str(tmp_path), stale_secs=1.0)
  mine = _record(tmp_path)
  assert mine["pid"] == os.getpid()
  proc.send_signal(signal.SIGCONT)  # Its renewal finds the lease lost.
  proc.communicate("", timeout=60)  # And its release leaves ours.
  assert proc.returncode == 0
  assert _record(tmp_path)["pid"] == os.getpid()
  taken.release()


def test_take_over_lease_takes_a_live_holders_lease(holder, tmp_path):
  proc = holder(str(tmp_path), stale_secs=3600)
  with _take(str(tmp_path), take_over=True):
    assert _record(tmp_path)["pid"] == os.getpid() != proc.pid


def test_the_holder_renews_its_lease(tmp_path):
  with _take(str(tmp_path), stale_secs=0.4):
    first = _record(tmp_path)["renewed"]
    deadline = time.monotonic() + 60
    while _record(tmp_path)["renewed"] == first:
      assert time.monotonic() < deadline, "never renewed"
      time.sleep(0.05)


def test_the_lease_on_cloud_storage_is_exclusive(holder, gcs_emulator):
  url = f"gs://{gcs_emulator.BUCKET}/run"
  fs = gcs_emulator.filesystem()
  proc = holder(url, stale_secs=1.0)
  object_path = f"{gcs_emulator.BUCKET}/run/{lease.LEASE_FILE}"
  assert json.loads(fs.cat_file(object_path))["pid"] == proc.pid
  with pytest.raises(lease.LeaseHeld, match=f"pid {proc.pid} on "):
    _take(url, stale_secs=1.0)
  proc.send_signal(signal.SIGSTOP)
  time.sleep(2.0)
  taken = _take(url, stale_secs=1.0)  # Stale: taken over by generation.
  assert json.loads(fs.cat_file(object_path))["pid"] == os.getpid()
  proc.send_signal(signal.SIGCONT)
  proc.communicate("", timeout=60)
  assert json.loads(fs.cat_file(object_path))["pid"] == os.getpid()
  taken.release()
  assert not fs.exists(object_path)


def test_the_emulator_honours_generation_preconditions(gcs_emulator):
  # ctl.lease relies on it; gcp-storage-emulator alone ignores it.
  store = lease._GcsStore(
    gcs_emulator.filesystem(), f"{gcs_emulator.BUCKET}/x/{lease.LEASE_FILE}"
  )
  generation = store.create(b"{}")
  with pytest.raises(FileExistsError):
    store.create(b"{}")
  with pytest.raises(FileExistsError):
    store.replace(b"{}", "1")
  newer = store.replace(b"{}", generation)
  store.delete(generation)  # Not the current generation: kept.
  assert store.read() is not None
  store.delete(newer)
  assert store.read() is None
