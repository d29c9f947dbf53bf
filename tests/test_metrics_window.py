"""Tests for ctl.train.metrics_window: means over a window, its log line, scalars."""

import numpy as np
import tensorflow as tf

from ctl.telemetry import summaries
from ctl.testing.run_files import read_scalars
from ctl.train import loop as loop_lib
from ctl.train import metric_set
from ctl.train import metrics_window
from tests.conftest import absl_messages


def _output(losses, correct_and_count=None):
  """A loop's output; its accuracy metric's state is (correct, examples)."""
  return loop_lib.LoopOutput(
    step_losses=np.array(losses),
    metric_state=(
      None if correct_and_count is None else np.array(correct_and_count)
    ),
    stop_requested=False,
    save_requested=False,
    host_seconds=np.zeros(1),
  )


def test_a_window_logs_its_means_writes_scalars_and_starts_again(
  tmp_path, caplog
):
  writer = summaries.ScalarWriter(logdir=str(tmp_path))
  window = metrics_window.MetricsWindow(
    metrics=metric_set.MetricSet(
      metric_set.sparse_accuracy,
      strategy=tf.distribute.get_strategy(),
    ),
    train_steps=40,
    global_batch_size=8,
    writer=writer,
    learning_rate=lambda: 0.5,
  )
  # Sums, not a mean of means: 8 of 16, then 16 of 16 examples right.
  window.add(_output([1.0, 3.0], (8.0, 16.0)), 2, seconds=1.0)
  window.add(_output([2.0, 2.0], (16.0, 16.0)), 2, seconds=1.0)
  window.log(4, {"straggler/ratio": 2.0})
  assert window.metrics == {"loss": 2.0, "accuracy": 0.75}
  assert window.throughput == [16.0]  # 4 steps of 8 in 2 s.
  window.add(_output([4.0]), 1, seconds=0.25)
  window.log(5)
  assert window.metrics == {"loss": 4.0}
  assert window.median_throughput() == 32.0  # The first window is left out.
  writer.close()
  scalars = read_scalars(str(tmp_path / summaries.TRAIN))
  assert scalars["loss"] == [(4, 2.0), (5, 4.0)]
  assert scalars["learning_rate"][0] == (4, 0.5)
  assert scalars["straggler/ratio"] == [(4, 2.0)]


def test_no_window_logged_has_no_throughput():
  window = metrics_window.MetricsWindow(
    train_steps=1,
    global_batch_size=1,
    writer=summaries.ScalarWriter(logdir=None),
    learning_rate=lambda: 0.1,
  )
  assert window.median_throughput() is None


def test_an_eta_of_days_shows_the_days(tmp_path):
  # 54 days and a bit: 4,676,487 steps left at one step a second.
  window = metrics_window.MetricsWindow(
    train_steps=4_676_497,
    global_batch_size=1,
    writer=summaries.ScalarWriter(logdir=str(tmp_path)),
    learning_rate=lambda: 0.1,
  )
  window.add(_output([1.0] * 10), 10, seconds=10.0)
  with absl_messages() as messages:
    window.log(10)
  [line] = [message for message in messages if "ETA" in message]
  assert line.endswith("ETA 54 days 03:01:27"), line
