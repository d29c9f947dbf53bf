"""End to end through the command line: train, resume, log, export, summarize."""

import os

import numpy as np
import pytest

from tests.conftest import FAST_FLAGS, read_scalars, read_summary, run_trainer


def test_quickstart_reaches_95_percent(model_dir):
  """The `make demo` configuration, as shipped, on real digits."""
  run_trainer("--flagfile=configs/quickstart.cfg", f"--model_dir={model_dir}")
  summary = read_summary(model_dir)
  assert summary["final_step"] == 600
  assert summary["eval_accuracy"] >= 0.95


def test_train_rerun_continue_and_outputs(model_dir):
  first = run_trainer(*FAST_FLAGS, "--train_steps=40",
                      f"--model_dir={model_dir}")
  summary = read_summary(model_dir)
  assert summary["final_step"] == 40
  assert summary["restores"] == 0
  for key in ("train_loss", "train_accuracy", "eval_accuracy", "eval_loss",
              "examples_per_second", "wall_seconds", "weights_fingerprint"):
    assert summary[key] is not None, key
  assert "step 40/40" in first.stderr

  # Same command again: steps are targets, so nothing more is trained.
  again = run_trainer(*FAST_FLAGS, "--train_steps=40",
                      f"--model_dir={model_dir}")
  assert "Restored step 40" in again.stderr
  assert "nothing to train" in again.stderr
  assert "step 50/" not in again.stderr
  assert read_summary(model_dir)["weights_fingerprint"] == (
      summary["weights_fingerprint"])

  # A larger target continues from the checkpoint.
  more = run_trainer(*FAST_FLAGS, "--train_steps=60",
                     f"--model_dir={model_dir}")
  assert "Restored step 40" in more.stderr
  assert "step 50/60" in more.stderr
  continued = read_summary(model_dir)
  assert continued["final_step"] == 60
  assert continued["restores"] >= 1

  scalars = read_scalars(os.path.join(model_dir, "tensorboard"))
  for tag in ("train/loss", "train/accuracy", "eval/loss", "eval/accuracy",
              "learning_rate", "examples_per_second", "steps_per_second"):
    assert tag in scalars, tag
  assert [step for step, _ in scalars["train/loss"]] == [10, 20, 30, 40, 50,
                                                         60]
  eval_steps = sorted({step for step, _ in scalars["eval/accuracy"]})
  assert {20, 40, 60} <= set(eval_steps)
  final_eval = [v for s, v in scalars["eval/accuracy"] if s == 60][-1]
  assert final_eval == pytest.approx(continued["eval_accuracy"], abs=1e-6)
  assert np.isfinite([v for _, v in scalars["train/loss"]]).all()


def test_saved_model_predicts_what_the_model_predicts(model_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from ctl import input as input_lib  # pylint: disable=g-import-not-at-top
  from trainer import data, model  # pylint: disable=g-import-not-at-top
  run_trainer(*FAST_FLAGS, "--train_steps=20", f"--model_dir={model_dir}")

  source = data.load("digits", image_size=16)
  images, _ = next(iter(input_lib.eval_dataset(
      records=source.eval_records, decode_fn=source.decode_fn,
      input_context=tf.distribute.InputContext(), global_batch_size=8)))
  images = images.numpy()
  trained = model.build_model(name="small_cnn", num_classes=10,
                              image_shape=(16, 16, 3), dropout=0.1)
  tf.train.Checkpoint(model=trained).restore(tf.train.latest_checkpoint(
      os.path.join(model_dir, "checkpoints"))).assert_existing_objects_matched()
  expected = trained(images, training=False).numpy()

  serving = tf.saved_model.load(os.path.join(model_dir, "saved_model"))
  outputs = serving.signatures["serving_default"](images=tf.constant(images))
  np.testing.assert_allclose(outputs["logits"].numpy(), expected, rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(outputs["probabilities"].numpy().sum(axis=1), 1.0,
                             rtol=1e-5)
  assert not np.allclose(expected, expected[:1])  # Inputs really differ.


def test_resnet50_trains_from_a_local_weights_file(tmp_path, model_dir):
  import keras  # pylint: disable=g-import-not-at-top
  backbone = keras.applications.ResNet50(include_top=False, weights=None,
                                         input_shape=(32, 32, 3))
  weights = str(tmp_path / "backbone.weights.h5")
  backbone.save_weights(weights)
  run_trainer("--model=resnet50", f"--weights={weights}",
              "--dataset=synthetic", "--image_size=32",
              "--per_replica_batch_size=4", "--train_steps=3",
              "--steps_per_loop=1", "--log_every_steps=1",
              "--checkpoint_every_steps=0", f"--model_dir={model_dir}")
  summary = read_summary(model_dir)
  assert summary["final_step"] == 3
  assert np.isfinite(summary["train_loss"])


def test_resnet50_loads_the_weights_file(tmp_path):
  import keras  # pylint: disable=g-import-not-at-top
  from trainer import model  # pylint: disable=g-import-not-at-top
  backbone = keras.applications.ResNet50(include_top=False, weights=None,
                                         input_shape=(32, 32, 3))
  weights = str(tmp_path / "backbone.weights.h5")
  backbone.save_weights(weights)
  built = model.build_model(name="resnet50", num_classes=5,
                            image_shape=(32, 32, 3), weights=weights)
  np.testing.assert_array_equal(built.get_layer("conv1_conv").kernel.numpy(),
                                backbone.get_layer("conv1_conv").kernel.numpy())
  assert built.output.shape[-1] == 5
  assert built.layers[-2].units == 1016  # The codelab's head.


@pytest.mark.parametrize("extra", [("--mixed_precision=bf16",), ("--xla",),
                                   ("--mixed_precision=bf16", "--xla")])
def test_mixed_precision_and_xla_train_and_export(extra, model_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  run_trainer(*FAST_FLAGS, "--train_steps=20", *extra,
              f"--model_dir={model_dir}")
  assert np.isfinite(read_summary(model_dir)["train_loss"])
  serving = tf.saved_model.load(os.path.join(model_dir, "saved_model"))
  logits = serving.signatures["serving_default"](
      images=tf.zeros([2, 16, 16, 3]))["logits"]
  assert logits.dtype == tf.float32  # Float32 out, whatever the policy.


def test_fp16_resume_restores_the_loss_scale(tmp_path):
  flags = (*FAST_FLAGS, "--mixed_precision=fp16", "--deterministic")
  straight, stopped = str(tmp_path / "straight"), str(tmp_path / "stopped")
  run_trainer(*flags, "--train_steps=30", f"--model_dir={straight}")
  run_trainer(*flags, "--train_steps=20", f"--model_dir={stopped}")
  run_trainer(*flags, "--train_steps=30", f"--model_dir={stopped}")
  assert read_summary(stopped)["weights_fingerprint"] == (
      read_summary(straight)["weights_fingerprint"])
