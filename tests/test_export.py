"""ctl.checkpoint.export: a SavedModel that serves what the model computes."""

import os
import shutil
import signal
import subprocess
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from ctl.checkpoint import export
from ctl.checkpoint import serving as serving_lib
from ctl.io import storage
from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import run_trainer
from tests.conftest import trained_model_dir
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from trainer import model as model_lib

IMAGE_SHAPE = (12, 12, 3)
SERVING = serving_lib.image_serving(IMAGE_SHAPE)


def _model():
  keras.utils.set_random_seed(0)
  return model_lib.build_model(
    name="small_cnn", num_classes=4, image_shape=IMAGE_SHAPE, dropout=0.5
  )


def _images(count=5, shape=IMAGE_SHAPE):
  return (
    np.random.RandomState(0).uniform(size=(count, *shape)).astype(np.float32)
  )


def test_reloaded_saved_model_agrees_with_the_model(tmp_path):
  model = _model()
  export_dir = str(tmp_path / "saved_model")
  export.export_saved_model(
    model=model,
    location=storage.open_location(export_dir),
    serving=SERVING,
    step=7,
  )
  assert os.path.isfile(os.path.join(export_dir, "saved_model.pb"))

  serving = tf.saved_model.load(export_dir).signatures["serving_default"]
  assert set(serving.structured_input_signature[1]) == {"images"}
  images = _images()
  outputs = serving(images=tf.constant(images))
  assert set(outputs) == {"logits", "probabilities"}
  assert outputs["logits"].dtype == tf.float32
  expected = model(images, training=False).numpy()  # Dropout off.
  np.testing.assert_allclose(
    outputs["logits"].numpy(), expected, rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(
    outputs["probabilities"].numpy(),
    tf.nn.softmax(expected).numpy(),
    rtol=1e-5,
    atol=1e-6,
  )
  assert not np.allclose(expected, expected[:1])  # The inputs really differ.
  # Any batch size is served.
  assert serving(images=tf.constant(images[:1]))["logits"].shape == (1, 4)


def test_non_chief_export_leaves_no_directory(tmp_path, monkeypatch):
  scratch_root = tmp_path / "tmp"
  scratch_root.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
  monkeypatch.chdir(tmp_path)
  export.export_saved_model(
    model=_model(), location=None, serving=SERVING, step=7
  )
  # TensorFlow's autograph caches the code it converts in the temporary
  # directory (the first conversion in this process): not an export's.
  left = [
    name
    for name in os.listdir(scratch_root)
    if not name.startswith("__autograph_generated_file")
  ]
  assert left == []
  assert os.listdir(tmp_path) == ["tmp"]


def test_a_new_export_replaces_the_old_one_whole(tmp_path):
  export_dir = str(tmp_path / "saved_model")
  location = storage.open_location(export_dir)
  assert export.exported_step(location) is None
  export.export_saved_model(
    model=_model(), location=location, serving=SERVING, step=1
  )
  assert export.exported_step(location) == 1
  keras.utils.set_random_seed(1)
  other = model_lib.build_model(
    name="small_cnn", num_classes=4, image_shape=IMAGE_SHAPE, dropout=0.5
  )
  os.mkdir(export_dir + ".partial-1-dead")  # Left by a killed export.
  export.export_saved_model(
    model=other, location=location, serving=SERVING, step=2
  )
  assert export.exported_step(location) == 2
  assert os.listdir(tmp_path) == ["saved_model"]  # Nothing left beside it.
  serving = tf.saved_model.load(export_dir).signatures["serving_default"]
  np.testing.assert_allclose(
    serving(images=tf.constant(_images()))["logits"].numpy(),
    other(_images(), training=False).numpy(),
    rtol=1e-5,
    atol=1e-6,
  )


# A kill during the export of a continued run (issue 20, item 2): the re-run
# must serve the final model, not the one the first run exported.
_EXPORT_FLAGS = (*FAST_FLAGS, "--eval_every_steps=0")


@pytest.fixture(scope="module")
def run_to_60(tmp_path_factory):
  """A model dir trained and exported at step 60 (copied by each test)."""
  return trained_model_dir(
    tmp_path_factory, "run60", *_EXPORT_FLAGS, "--train_steps=60"
  )


def _served_logits(model_dir):
  """What a reader gets: load the SavedModel, run its serving signature."""
  serving = tf.saved_model.load(os.path.join(model_dir, "saved_model"))
  images = _images(count=6, shape=(16, 16, 3))
  return serving.signatures["serving_default"](images=tf.constant(images))[
    "logits"
  ].numpy()


def _checkpoint_logits(model_dir):
  """The logits of the newest checkpoint's model (the final one)."""
  trained = model_lib.build_model(
    name="small_cnn", num_classes=10, image_shape=(16, 16, 3), dropout=0.1
  )
  path = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
  assert path.endswith("-120"), path
  tf.train.Checkpoint(model=trained).restore(
    path
  ).assert_existing_objects_matched()
  images = _images(count=6, shape=(16, 16, 3))
  return trained(images, training=False).numpy()


def _continue_killed_in_export(model_dir, kill):
  """Continues to step 120 and ends the process in its export phase."""
  if kill == "SIGKILL":
    result = run_trainer(
      *_EXPORT_FLAGS,
      "--train_steps=120",
      f"--model_dir={model_dir}",
      env=trainer_env(faults="crash@120:export"),
      check=False,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    return
  # SIGTERM while the export phase is held for a few seconds.
  process = subprocess.Popen(
    trainer_command(
      *_EXPORT_FLAGS, "--train_steps=120", f"--model_dir={model_dir}"
    ),
    cwd=REPO,
    env=trainer_env(faults="stall@120:export:secs=8"),
    stderr=subprocess.PIPE,
    text=True,
  )
  lines = []
  for line in process.stderr:
    lines.append(line)
    if "fault: injecting stall in export" in line:
      process.send_signal(signal.SIGTERM)
      break
  rest = process.communicate(timeout=300)[1]
  assert process.returncode in (143, -signal.SIGTERM), "".join(lines) + rest


@pytest.mark.parametrize("kill", ["SIGKILL", "SIGTERM"])
@pytest.mark.processes
def test_a_kill_during_export_is_not_trusted_by_the_rerun(
  run_to_60, tmp_path, kill
):
  model_dir = str(tmp_path / "run")
  shutil.copytree(run_to_60, model_dir)
  at_60 = _served_logits(model_dir)
  _continue_killed_in_export(model_dir, kill)

  rerun = run_trainer(
    *_EXPORT_FLAGS, "--train_steps=120", f"--model_dir={model_dir}"
  )
  assert "nothing to train" in rerun.stderr
  final = _checkpoint_logits(model_dir)
  assert not np.allclose(final, at_60)  # Steps 60-120 changed the model.
  np.testing.assert_allclose(
    _served_logits(model_dir), final, rtol=1e-5, atol=1e-5
  )
  location = storage.open_location(os.path.join(model_dir, "saved_model"))
  assert export.exported_step(location) == 120
  assert sorted(os.listdir(model_dir)) == sorted(os.listdir(run_to_60))


@pytest.mark.processes
def test_a_rerun_removes_the_old_model_a_kill_after_the_swap_left(
  run_to_60, tmp_path
):
  # Killed after the swap, before its cleanup: the old model is left at the
  # partial name (issue 27, item 14); the re-run has nothing to train or
  # export, and removes it, never the live export.
  model_dir = str(tmp_path / "run")
  shutil.copytree(run_to_60, model_dir)
  live = os.path.join(model_dir, "saved_model")
  shutil.copytree(live, live + ".partial-4242-0badf00d")
  os.mkdir(live + ".partial-4242-0badf00d.old")
  served = _served_logits(model_dir)
  rerun = run_trainer(
    *_EXPORT_FLAGS, "--train_steps=60", f"--model_dir={model_dir}"
  )
  assert "nothing to train" in rerun.stderr
  assert sorted(os.listdir(model_dir)) == sorted(os.listdir(run_to_60))
  np.testing.assert_array_equal(_served_logits(model_dir), served)
