"""ctl.summaries: the chief's scalars land in event files; others write none."""

import os

import pytest

from ctl import summaries
from tests.conftest import read_scalars


def test_scalars_are_readable_at_their_steps(tmp_path):
  logdir = str(tmp_path / "tensorboard")
  writer = summaries.ScalarWriter(logdir=logdir)
  writer.write(10, {"train/loss": 2.5, "train/accuracy": 0.25})
  writer.write(20, {"train/loss": 1.5, "train/accuracy": 0.5})
  writer.write(20, {"eval/accuracy": 0.75})
  # Flushed on every write: readable before the writer is closed.
  assert read_scalars(logdir)["train/loss"] == [(10, 2.5), (20, 1.5)]
  writer.close()

  scalars = read_scalars(logdir)
  assert set(scalars) == {"train/loss", "train/accuracy", "eval/accuracy"}
  assert scalars["train/accuracy"] == [(10, 0.25), (20, 0.5)]
  assert scalars["eval/accuracy"] == [(20, 0.75)]


def test_a_writer_without_logdir_writes_no_files(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  writer = summaries.ScalarWriter(logdir=None)
  writer.write(1, {"train/loss": 1.0})
  writer.close()
  assert os.listdir(tmp_path) == []


def test_nothing_is_written_before_the_first_scalar(tmp_path):
  """A run that fails before logging leaves its TensorBoard dir as it was."""
  logdir = tmp_path / "tensorboard"
  writer = summaries.ScalarWriter(logdir=str(logdir))
  writer.close()
  assert not logdir.exists()


@pytest.mark.parametrize("logdir", [None, "run"])
def test_close_twice_is_harmless(tmp_path, logdir):
  writer = summaries.ScalarWriter(logdir=logdir and str(tmp_path / logdir))
  writer.write(1, {"x": 1.0})
  writer.close()
  writer.close()
