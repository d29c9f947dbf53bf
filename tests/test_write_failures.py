"""A run whose storage refuses a write ends in one sentence, exit 74.

Real failures, no mocks: a full disk is a small tmpfs (mounting one needs
root), a permission lost mid-run is the checkpoint directory made immutable
(`chattr +i`, which binds root too) while the run is held at the start of a
save. Each test then continues the run on a healthy disk to show that what was
saved before the failure is intact.
"""

import errno
import os
import shutil
import subprocess
import tempfile

import pytest

from ctl.testing import events as events_lib
from tests.conftest import FAST_FLAGS
from tests.conftest import read_summary
from tests.conftest import run_trainer
from tests.conftest import trained_model_dir
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from trainer import testing

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

CANNOT_WRITE_EXIT_CODE = 74
_FLAGS = (*FAST_FLAGS, "--checkpoint_every_steps=10")

needs_root = pytest.mark.skipif(
  os.geteuid() != 0, reason="mounting a tmpfs and chattr need root"
)


def _size(path: str) -> int:
  if os.path.isfile(path):
    return os.path.getsize(path)
  return sum(
    os.path.getsize(os.path.join(root, name))
    for root, _, names in os.walk(path)
    for name in names
  )


@pytest.fixture(scope="module")
def sizes(tmp_path_factory):
  """Bytes of one checkpoint, of the SavedModel, and of everything else."""
  model_dir = trained_model_dir(
    tmp_path_factory, "reference", *_FLAGS, "--train_steps=10"
  )
  checkpoint = sum(
    _size(os.path.join(model_dir, "checkpoints", name))
    for name in os.listdir(os.path.join(model_dir, "checkpoints"))
    if name.startswith("ckpt-10.")
  )
  export = _size(os.path.join(model_dir, "saved_model"))
  rest = _size(model_dir) - export - 2 * checkpoint
  return checkpoint, export, rest


@pytest.fixture
def small_disk():
  """Mounts a tmpfs of a given size; unmounted at the end."""
  mounts = []

  def mount(size: int) -> str:
    point = tempfile.mkdtemp(prefix="ctl_small_disk_")
    result = subprocess.run(
      ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", point],
      capture_output=True,
      text=True,
      check=False,
    )
    if result.returncode != 0:
      os.rmdir(point)
      pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    mounts.append(point)
    return point

  yield mount
  for point in mounts:
    subprocess.run(["umount", point], check=True)
    os.rmdir(point)


def _ends_with_one_sentence(result, *words: str) -> str:
  assert result.returncode == CANNOT_WRITE_EXIT_CODE, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  lines = result.stderr.strip().splitlines()
  errors = [line for line in lines if line.startswith("error: ")]
  assert errors == lines[-1:], result.stderr[-3000:]
  for word in words:
    assert word in errors[0], errors[0]
  return errors[0]


def _continues_on_a_healthy_disk(model_dir, tmp_path, train_steps) -> list:
  """Copies the run to a healthy disk and finishes it; the steps restored."""
  healthy = str(tmp_path / "healthy")
  shutil.copytree(model_dir, healthy)
  events = f"{healthy}.events.jsonl"
  run_trainer(
    *_FLAGS,
    f"--train_steps={train_steps}",
    f"--model_dir={healthy}",
    events=events,
  )
  assert read_summary(healthy)["final_step"] == train_steps
  return events_lib.restored_steps(events)


@needs_root
def test_disk_full_during_a_checkpoint_save(sizes, small_disk, tmp_path):
  checkpoint, _, rest = sizes
  # Room for ckpt-0 and the logs, not for ckpt-10.
  model_dir = os.path.join(small_disk(rest + checkpoint * 3 // 2), "run")
  result = run_trainer(
    *_FLAGS, "--train_steps=20", f"--model_dir={model_dir}", check=False
  )
  checkpoints = os.path.join(model_dir, "checkpoints")
  assert _ends_with_one_sentence(result) == (
    f"error: Cannot write the checkpoint of step 10 in {checkpoints}: no "
    "space left on device; the checkpoints saved before are intact: free "
    "space or restore write permission, then run the same command to "
    "continue."
  )
  assert _continues_on_a_healthy_disk(model_dir, tmp_path, 20) == [0]


@needs_root
def test_disk_full_during_export(sizes, small_disk, tmp_path):
  checkpoint, export, rest = sizes
  # Room for ckpt-0, ckpt-10 and the logs, not for the SavedModel.
  disk = small_disk(rest + 2 * checkpoint + export // 2)
  model_dir = os.path.join(disk, "run")
  result = run_trainer(
    *_FLAGS, "--train_steps=10", f"--model_dir={model_dir}", check=False
  )
  _ends_with_one_sentence(
    result,
    "Cannot write the SavedModel of step 10 in "
    f"{os.path.join(model_dir, 'saved_model')}: no space left on device",
  )
  assert sorted(os.listdir(disk)) == ["run"]  # No partial export left.
  assert not os.path.exists(os.path.join(model_dir, "saved_model"))
  assert _continues_on_a_healthy_disk(model_dir, tmp_path, 10) == [10]


@needs_root
@pytest.mark.skipif(not shutil.which("chattr"), reason="needs chattr")
def test_write_permission_lost_mid_run(tmp_path):
  model_dir = str(tmp_path / "run")
  checkpoints = os.path.join(model_dir, "checkpoints")
  events = f"{model_dir}.events.jsonl"
  # Held 8 s at the start of the save of step 10, while the test takes the
  # permission away (the save's start mark comes first; the test polls the
  # events every 50 ms).
  process = testing.start(
    trainer_command(*_FLAGS, "--train_steps=20", f"--model_dir={model_dir}"),
    events=events,
    env=trainer_env(faults="stall@10:checkpoint_save:secs=8"),
  )
  immutable = False
  try:
    events_lib.wait_for_event(
      events,
      lambda e: (
        e["phase"] == "checkpoint_save"
        and e["step"] == 10
        and e["seconds"] is None
      ),
      process=process,
    )
    chattr = subprocess.run(
      ["chattr", "+i", checkpoints], capture_output=True, text=True
    )
    if chattr.returncode != 0:
      pytest.skip(f"chattr +i is refused here: {chattr.stderr.strip()}")
    immutable = True
    code, output = testing.finish(process)
  finally:
    if process.poll() is None:
      process.kill()
    if immutable:
      subprocess.run(["chattr", "-i", checkpoints], check=True)
  result = subprocess.CompletedProcess([], code, "", output)
  _ends_with_one_sentence(
    result,
    f"Cannot write the checkpoint of step 10 in {checkpoints}: operation "
    "not permitted",
  )
  assert _continues_on_a_healthy_disk(model_dir, tmp_path, 20) == [0]


def _fill(directory: str) -> None:
  """Writes into `directory` until its disk has no byte left."""
  with open(os.path.join(directory, "filler"), "wb", buffering=0) as f:
    try:
      while True:
        f.write(b"\0" * 4096)
    except OSError as e:
      assert e.errno == errno.ENOSPC, e


@needs_root
def test_full_disks_of_summaries_and_ledger_stop_no_training(
  small_disk, tmp_path
):
  # Summaries and the ledger are observations: on main a full TensorBoard
  # disk stopped training with a traceback (exit 1, the steps lost), and a
  # full ledger disk gave a traceback and an empty *.tmp file per event.
  tensorboard, ledger_disk = small_disk(64 * 1024), small_disk(64 * 1024)
  _fill(tensorboard)
  _fill(ledger_disk)
  model_dir = tmp_path / "run"
  model_dir.mkdir()
  (model_dir / "ledger").symlink_to(ledger_disk)
  result = run_trainer(
    *_FLAGS,
    "--train_steps=20",
    f"--model_dir={model_dir}",
    f"--tensorboard_dir={tensorboard}",
    check=False,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  assert read_summary(model_dir)["final_step"] == 20
  said = [
    line
    for line in result.stderr.splitlines()
    if "Cannot write the " in line and "no space left on device" in line
  ]
  assert len(said) == 2, said
  assert f"TensorBoard summaries in {tensorboard}: " in said[0]
  assert f"run ledger in {model_dir / 'ledger'}: " in said[1]
  for disk in (tensorboard, ledger_disk):
    left = [
      name
      for _, _, names in os.walk(disk)
      for name in names
      if name.endswith(".tmp")
    ]
    assert not left, left
