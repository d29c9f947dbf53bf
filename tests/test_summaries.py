"""ctl.telemetry.summaries: one run dir per role, the chief's scalars only, HParams."""

import os

import pytest
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata

from ctl.telemetry import summaries
from tests.conftest import read_scalars


def test_scalars_land_in_their_run_dir_at_their_steps(tmp_path):
  logdir = str(tmp_path / "tensorboard")
  writer = summaries.ScalarWriter(logdir=logdir)
  writer.write(10, {"loss": 2.5, "accuracy": 0.25}, run=summaries.TRAIN)
  writer.write(20, {"loss": 1.5, "accuracy": 0.5})  # train by default
  writer.write(20, {"accuracy": 0.75}, run=summaries.VALIDATION)
  # Flushed on every write: readable before the writer is closed.
  train = os.path.join(logdir, "train")
  assert read_scalars(train)["loss"] == [(10, 2.5), (20, 1.5)]
  writer.close()

  assert read_scalars(train) == {
    "loss": [(10, 2.5), (20, 1.5)],
    "accuracy": [(10, 0.25), (20, 0.5)],
  }
  assert read_scalars(os.path.join(logdir, "validation")) == {
    "accuracy": [(20, 0.75)]
  }
  assert sorted(os.listdir(logdir)) == ["train", "validation"]
  assert writer.run_dir("train") == train
  assert writer.run_dir("") == logdir


def test_hparams_are_a_session_over_train_and_validation(tmp_path):
  logdir = str(tmp_path / "tensorboard")
  writer = summaries.ScalarWriter(logdir=logdir)
  writer.write_hparams(
    {"learning_rate": 0.01, "model": "cnn", "xla": False, "batch": 64},
    metric_names=("accuracy",),
  )
  writer.close()
  accumulator = event_accumulator.EventAccumulator(logdir)
  accumulator.Reload()
  content = accumulator.PluginTagToContent(hparams_metadata.PLUGIN_NAME)
  start = hparams_metadata.parse_session_start_info_plugin_data(
    content[hparams_metadata.SESSION_START_INFO_TAG]
  )
  assert start.hparams["learning_rate"].number_value == 0.01
  assert start.hparams["model"].string_value == "cnn"
  assert start.hparams["xla"].bool_value is False
  assert start.hparams["batch"].number_value == 64
  experiment = hparams_metadata.parse_experiment_plugin_data(
    content[hparams_metadata.EXPERIMENT_TAG]
  )
  assert [(m.name.group, m.name.tag) for m in experiment.metric_infos] == [
    ("validation", "accuracy"),
    ("validation", "loss"),
    ("train", "accuracy"),
    ("train", "loss"),
  ]


def test_a_writer_without_logdir_writes_no_files(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  writer = summaries.ScalarWriter(logdir=None)
  writer.write(1, {"loss": 1.0}, run=summaries.VALIDATION)
  writer.write_hparams({"learning_rate": 0.01})
  writer.close()
  assert os.listdir(tmp_path) == []
  assert writer.run_dir("train") is None


def test_nothing_is_written_before_the_first_scalar(tmp_path):
  """A run that fails before logging leaves its TensorBoard dir as it was."""
  logdir = tmp_path / "tensorboard"
  writer = summaries.ScalarWriter(logdir=str(logdir))
  writer.write_hparams({})  # No hyperparameters: nothing to write.
  writer.close()
  assert not logdir.exists()


@pytest.mark.parametrize("logdir", [None, "run"])
def test_close_twice_is_harmless(tmp_path, logdir):
  writer = summaries.ScalarWriter(logdir=logdir and str(tmp_path / logdir))
  writer.write(1, {"x": 1.0})
  writer.close()
  writer.close()
