"""Bad input through the command line: one sentence, exit 2, nothing changed.

Every case runs against a copy of a real, finished run directory (checkpoints,
TensorBoard events, SavedModel, summary) and checks that the failed command
left every file in it as it was.
"""

import os
import shutil

import pytest

from tests.conftest import FAST_FLAGS, run_trainer

USER_ERROR_EXIT_CODE = 2


def snapshot(directory) -> dict[str, tuple[int, int]]:
  """{relative path: (size, mtime_ns)} of every file under `directory`."""
  files = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      stat = os.stat(path)
      files[os.path.relpath(path, directory)] = (stat.st_size,
                                                 stat.st_mtime_ns)
  return files


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  """A digits run (10 classes) trained to step 10, with all its outputs."""
  model_dir = str(tmp_path_factory.mktemp("finished") / "run")
  run_trainer(*FAST_FLAGS, "--train_steps=10", f"--model_dir={model_dir}")
  return model_dir


@pytest.fixture
def model_dir(finished_run, tmp_path):
  copy = str(tmp_path / "run")
  shutil.copytree(finished_run, copy)  # copy2: sizes and mtimes preserved.
  assert snapshot(copy) == snapshot(finished_run)
  return copy


def _fails_cleanly(model_dir, *flags) -> str:
  """Runs the trainer on `model_dir` expecting a user error; returns it."""
  before = snapshot(model_dir)
  assert {"train_summary.json", "checkpoint"} <= {
      os.path.basename(path) for path in before}
  result = run_trainer(*FAST_FLAGS, "--train_steps=20", *flags,
                       f"--model_dir={model_dir}", check=False)
  assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  assert snapshot(model_dir) == before
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: "), result.stderr[-3000:]
  assert last.endswith("."), last
  return last


@pytest.mark.parametrize("flag,words", [
    ("--dataset=mnist", "--dataset=mnist: value should be one of"),
    ("--model=vgg16", "--model=vgg16: value should be one of"),
    ("--per_replica_batch_size=0", "--per_replica_batch_size must be > 0"),
])
def test_bad_flag_values(model_dir, flag, words):
  assert words in _fails_cleanly(model_dir, flag)


@pytest.mark.parametrize("flag,last", [
    ("--profile_steps=30,20", "error: profile_steps must be START,END with "
     "1 <= START <= END, got 30,20."),
    ("--profile_steps=12", "error: --profile_steps must be START,END (two "
     "step numbers, e.g. 100,110), got '12'."),
])
def test_bad_profile_range(model_dir, flag, last):
  assert _fails_cleanly(model_dir, flag) == last


def test_checkpoint_interval_not_a_multiple_of_the_loop(model_dir):
  last = _fails_cleanly(model_dir, "--steps_per_loop=10",
                        "--checkpoint_every_steps=25")
  assert last == ("error: checkpoint_every_steps must be a multiple of "
                  "steps_per_loop (10), got 25.")


def test_cassava_with_an_empty_data_dir(model_dir, tmp_path):
  empty = tmp_path / "tfds"
  empty.mkdir()
  last = _fails_cleanly(model_dir, "--dataset=cassava",
                        f"--data_dir={empty}")
  assert f"cassava is not prepared in --data_dir={empty}" in last
  assert "tfds build cassava" in last


def test_resnet50_weights_file_not_found(model_dir, tmp_path):
  missing = tmp_path / "no_such_weights.h5"
  last = _fails_cleanly(model_dir, "--model=resnet50",
                        f"--weights={missing}")
  assert f"Weights file {missing} not found" in last


def test_checkpoint_of_a_different_model(model_dir):
  # The run trained 10 digit classes; synthetic data has 5.
  last = _fails_cleanly(model_dir, "--dataset=synthetic")
  checkpoints = os.path.join(model_dir, "checkpoints")
  assert f"The checkpoint {checkpoints}" in last
  assert "was written by a different model" in last
