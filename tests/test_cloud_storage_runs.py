"""The trainer with gs:// outputs, killed, cut off and resumed, end to end.

Every test runs the real command line (`python -m trainer.task`) in a
subprocess. The gcsfs route talks to a real gcp-storage-emulator process
(see ctl/testing/gcs_emulator.py), which a test can stop in the middle of an
upload and start again; the FUSE route's mount is a local directory, as Cloud
Storage FUSE presents one. Each trainer process gets its own TMPDIR, so its
staging directories are its own: a re-run with a fresh TMPDIR has no local
copy of anything and must read its checkpoint back from the bucket.
"""

import glob
import os
import re
import signal
import threading
import time

from fsspec.implementations import local as fsspec_local
import pytest

from ctl.testing import events as events_lib
from ctl.testing.gcs_emulator import GcsEmulator
from tests.conftest import FAST_FLAGS
from tests.conftest import read_scalars
from tests.conftest import read_summary
from tests.conftest import run_trainer
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from trainer.testing import finish
from trainer.testing import stall_on_frozen_upload
from trainer.testing import start
from trainer.testing import start_until_step
from trainer.testing import train_to_summary
from trainer.testing import vertex_output_env

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

BUCKET = GcsEmulator.BUCKET
STEPS = 60
CHECKPOINT_EVERY = 10
FLAGS = (
  *FAST_FLAGS,
  "--deterministic",
  f"--train_steps={STEPS}",
  "--steps_per_loop=5",
  "--log_every_steps=5",
  f"--checkpoint_every_steps={CHECKPOINT_EVERY}",
  "--eval_every_steps=20",
)
_LATEST = re.compile(rb'^model_checkpoint_path: "ckpt-(\d+)"', re.MULTILINE)


class _Bucket:
  """A bucket seen from outside the trainer, through an fsspec filesystem.

  The emulator's bucket is read with gcsfs pointed at the emulator; a
  FUSE-mounted bucket is read as the local directory it is.
  """

  def __init__(self, fs, root: str):
    self._fs = fs
    self._root = root.rstrip("/")

  @classmethod
  def emulated(cls, emulator: GcsEmulator) -> "_Bucket":
    return cls(emulator.filesystem(), BUCKET)

  @classmethod
  def mounted(cls, mount: str) -> "_Bucket":
    return cls(fsspec_local.LocalFileSystem(), mount)

  def names(self, prefix: str) -> set[str]:
    """Every object under `prefix`, as a path relative to it."""
    base = f"{self._root}/{prefix}"
    return {os.path.relpath(path, base) for path in self._fs.find(base)}

  def read(self, path: str) -> bytes:
    return self._fs.cat_file(f"{self._root}/{path}")

  def latest_checkpoint_step(self, prefix: str) -> int:
    """The step of the checkpoint the remote state file names as latest."""
    match = _LATEST.search(self.read(f"{prefix}/checkpoint"))
    assert match, f"no latest checkpoint in {prefix}/checkpoint"
    return int(match.group(1))

  def download(self, prefix: str, local_dir: str) -> str:
    """Copies every object under `prefix` into `local_dir`; returns it."""
    for name in self.names(prefix):
      target = os.path.join(local_dir, name)
      os.makedirs(os.path.dirname(target), exist_ok=True)
      self._fs.get_file(f"{self._root}/{prefix}/{name}", target)
    return local_dir


def _env(tmp_path, name: str, **extra) -> dict:
  """The trainer's environment with a TMPDIR (so staging) of its own."""
  tmpdir = tmp_path / name
  tmpdir.mkdir()
  return trainer_env(
    TMPDIR=str(tmpdir), GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false", **extra
  )


def _restored_step(events: str) -> int:
  (step,) = events_lib.restored_steps(events)
  return step


def _data_file(step: int) -> str:
  return f"checkpoints/ckpt-{step}.data-00000-of-00001"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The summary of an uninterrupted run on local disk, same flags."""
  model_dir = str(tmp_path_factory.mktemp("reference") / "run")
  return train_to_summary(*FLAGS, model_dir=model_dir)


@pytest.fixture(params=["gcsfs", "fuse"])
def route(request, tmp_path):
  """(trainer flags, the bucket as seen from outside) for one route."""
  if request.param == "gcsfs":
    emulator = request.getfixturevalue("gcs_emulator")
    flags = ("--storage=gcsfs",)
    return flags, _Bucket.emulated(emulator)
  mount = tmp_path / "gcs" / BUCKET
  mount.mkdir(parents=True)
  # `auto` must find the mount by itself.
  flags = ("--storage=auto", f"--fuse_root={tmp_path / 'gcs'}")
  return flags, _Bucket.mounted(str(mount))


def _run_again(tmp_path, bucket, *storage_flags) -> tuple[int, dict]:
  """Runs the job again to its end with a fresh TMPDIR: no staging is left,
  the checkpoint comes from the bucket. (The step it restored, its summary
  downloaded from the bucket.)"""
  events = str(tmp_path / "second.jsonl")
  run_trainer(
    *FLAGS,
    *storage_flags,
    f"--model_dir=gs://{BUCKET}/run",
    env=_env(tmp_path, "second"),
    events=events,
  )
  summary = read_summary(bucket.download("run", str(tmp_path / "downloaded")))
  return _restored_step(events), summary


def test_sigkill_then_resume_from_the_bucket(reference, route, tmp_path):
  storage_flags, bucket = route
  # Bucket checkpoints only: with the local tier, bucket copies are made in
  # the background and ckpt-20 may still be on its way at step 25 (its
  # own tests are in test_checkpoint_tiers.py).
  command = trainer_command(
    *FLAGS,
    *storage_flags,
    "--local_checkpoints=off",
    f"--model_dir=gs://{BUCKET}/run",
  )
  kill_at = 25  # After ckpt-20 is published: saves block until uploaded.
  process = start_until_step(
    command,
    events=str(tmp_path / "first.jsonl"),
    step=kill_at,
    env=_env(tmp_path, "first"),
  )
  process.kill()
  code, output = finish(process)
  assert code == -signal.SIGKILL, output[-3000:]
  committed = bucket.latest_checkpoint_step("run/checkpoints")
  assert committed >= kill_at - kill_at % CHECKPOINT_EVERY

  restored, summary = _run_again(tmp_path, bucket, *storage_flags)
  assert restored == committed
  assert summary["final_step"] == STEPS
  assert summary["restores"] == 1
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]

  names = bucket.names("run")
  assert "saved_model/saved_model.pb" in names
  assert "checkpoints/checkpoint" in names
  assert bucket.latest_checkpoint_step("run/checkpoints") == STEPS
  # One events file per process; together they hold the whole run.
  assert (
    len(
      [
        n
        for n in names
        if n.startswith("tensorboard/train/") and "tfevents" in n
      ]
    )
    == 2
  )
  board = tmp_path / "downloaded" / "tensorboard"
  train = read_scalars(str(board / "train"))
  validation = read_scalars(str(board / "validation"))
  assert max(step for step, _ in train["loss"]) == STEPS
  assert max(step for step, _ in validation["accuracy"]) == STEPS
  assert {step for step, _ in train["loss"]} >= set(range(5, STEPS + 1, 5))


def test_upload_cut_by_an_outage_is_retried(reference, gcs_emulator, tmp_path):
  cut = 30
  # The server dies as ckpt-30's data arrives and is back 2 s later.
  gcs_emulator.restart(exit_on_upload=_data_file(cut))
  outage = {}

  def restart_after_outage():
    try:
      gcs_emulator.wait_until_exited(timeout_s=240)
      outage["happened"] = True
      time.sleep(2)
      gcs_emulator.start()
    except Exception as error:  # pylint: disable=broad-except
      outage["error"] = error

  restarter = threading.Thread(target=restart_after_outage)
  restarter.start()
  try:
    result = run_trainer(
      *FLAGS,
      "--storage=gcsfs",
      f"--model_dir=gs://{BUCKET}/run",
      env=_env(tmp_path, "run"),
      check=False,
    )
  finally:
    restarter.join()
  assert "error" not in outage, outage
  assert outage.get("happened"), "the emulator never saw the upload"
  assert result.returncode == 0, result.stderr[-3000:]

  bucket = _Bucket.emulated(gcs_emulator)
  names = bucket.names("run")
  assert bucket.latest_checkpoint_step("run/checkpoints") == STEPS
  assert {f"checkpoints/ckpt-{STEPS}.index", _data_file(STEPS)} <= names
  summary = read_summary(bucket.download("run", str(tmp_path / "downloaded")))
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]


def test_checkpoint_cut_mid_upload_is_never_restored(
  reference, gcs_emulator, tmp_path
):
  cut = 30
  gcs_emulator.restart(exit_on_upload=_data_file(cut))
  process = start(
    trainer_command(
      *FLAGS, "--storage=gcsfs", f"--model_dir=gs://{BUCKET}/run"
    ),
    events=str(tmp_path / "first.jsonl"),
    env=_env(tmp_path, "first"),
  )
  try:
    gcs_emulator.wait_until_exited(timeout_s=240)
  finally:
    # Killed while its upload of ckpt-30 waits for the server.
    process.kill()
    code, output = finish(process)
  assert code == -signal.SIGKILL, output[-3000:]
  # It was saved in the staging directory, and cut off on its way up.
  assert glob.glob(
    str(tmp_path / "first" / "ctl-staging-*" / "*" / f"ckpt-{cut}.index")
  )
  gcs_emulator.start()
  bucket = _Bucket.emulated(gcs_emulator)
  committed = bucket.latest_checkpoint_step("run/checkpoints")
  assert 0 < committed < cut

  restored, summary = _run_again(tmp_path, bucket, "--storage=gcsfs")
  assert restored == committed
  assert summary["final_step"] == STEPS
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]


def test_upload_that_never_completes_is_a_stall(
  reference, gcs_emulator, tmp_path
):
  """The server freezes (SIGSTOP) as ckpt-20's data arrives, mid-save."""
  cut = 20  # Not the first upload: the first run of a phase has a longer
  # limit (--startup_timeout_secs).
  gcs_emulator.restart(freeze_on_upload=_data_file(cut))
  flags = (
    *FLAGS,
    "--storage=gcsfs",
    f"--model_dir=gs://{BUCKET}/run",
    "--stall_timeout_secs=10",
    # The save of `cut` uploads in the step's own phase only without the
    # local tier (with it, a thread copies and the next save waits for it).
    "--local_checkpoints=off",
  )
  events = str(tmp_path / "first.jsonl")
  output = stall_on_frozen_upload(
    trainer_command(*flags),
    gcs_emulator,
    events=events,
    env=_env(tmp_path, "first"),
  )
  # Stuck in the save of `cut`: its last mark started a phase never ended,
  # then the watchdog ended the run as stalled.
  *_, stuck, ended = events_lib.read_events(events)
  assert (ended["phase"], ended["ok"], ended["error"]) == (
    "run",
    False,
    "Stalled",
  )
  assert stuck["phase"] in ("checkpoint_upload", "checkpoint_save")
  assert (stuck["step"], stuck["seconds"]) == (cut, None), output[-3000:]
  assert "stall: worker 0 made no progress" in output
  bucket = _Bucket.emulated(gcs_emulator)
  committed = bucket.latest_checkpoint_step("run/checkpoints")
  assert 0 < committed < cut

  # The same command again, the server back: it goes on from `committed`.
  run_trainer(
    *flags, env=_env(tmp_path, "second"), events=str(tmp_path / "second.jsonl")
  )
  assert _restored_step(str(tmp_path / "second.jsonl")) == committed
  summary = read_summary(bucket.download("run", str(tmp_path / "downloaded")))
  assert summary["final_step"] == STEPS
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]


def test_vertex_directories_alone_place_every_output(gcs_emulator, tmp_path):
  aip = vertex_output_env(f"gs://{BUCKET}/aip")
  # No mount at --fuse_root, so `auto` takes gcsfs wherever this runs.
  run_trainer(
    *FLAGS,
    "--train_steps=20",
    f"--fuse_root={tmp_path / 'gcs'}",
    env=_env(tmp_path, "run", **aip),
  )

  bucket = _Bucket.emulated(gcs_emulator)
  names = bucket.names("aip")
  assert {name.split("/")[0] for name in names} == {
    "checkpoints",
    "ledger",
    "logs",
    "model",
    "train_summary.json",
  }
  assert {
    "checkpoints/checkpoint",
    "model/saved_model.pb",
    "model/ctl_export.json",  # Its commit marker, uploaded last.
    "train_summary.json",
  } <= names
  assert bucket.latest_checkpoint_step("aip/checkpoints") == 20
  logs = bucket.download("aip/logs", str(tmp_path / "logs"))
  assert "loss" in read_scalars(os.path.join(logs, "train"))
  assert all(name.startswith("aip/") for name in bucket.names(""))


def test_missing_bucket_fails_before_training(gcs_emulator, tmp_path):
  del gcs_emulator  # Running, but without that bucket.
  result = run_trainer(
    *FLAGS,
    "--storage=gcsfs",
    "--model_dir=gs://no-such-bucket/run",
    env=_env(tmp_path, "run"),
    check=False,
    events=str(tmp_path / "events.jsonl"),
  )
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  errors = [
    line for line in result.stderr.splitlines() if line.startswith("error:")
  ]
  assert errors == [result.stderr.strip().splitlines()[-1]]
  assert errors[0].startswith("error: Cannot write to gs://no-such-bucket/run")
  assert errors[0].endswith(".")
  # Before training: no restore, no train loop, no save was started.
  assert not {
    e["phase"] for e in events_lib.read_events(str(tmp_path / "events.jsonl"))
  } & {"restore", "first_loop", "checkpoint_save"}
