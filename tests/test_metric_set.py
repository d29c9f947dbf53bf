"""ctl.train.metric_set: the task's metrics by name, from sums and counts,
everywhere a run reports (the log, TensorBoard, the summary, the actions)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from ctl import report
from ctl.telemetry import ledger_reader
from ctl.train import controller
from ctl.train import metric_set
from tests import tasks
from tests.conftest import read_scalars


def test_results_of_summed_states_are_not_means_of_means():
  metrics = metric_set.MetricSet(
    lambda: {"mae": keras.metrics.MeanAbsoluteError()},
    strategy=tf.distribute.get_strategy(),
  )
  # Two loops: an error of 1 over 2 examples, then of 4 over 6: the mean
  # is 26 / 8, not (1 + 4) / 2.
  first, second = np.array([2.0, 2.0]), np.array([24.0, 6.0])
  assert metrics.results(first + second) == {"mae": pytest.approx(26 / 8)}
  assert metrics.names == ("mae",) and metrics.size == 2


def test_a_run_reports_the_users_metrics_by_name_everywhere(tmp_path):
  seen = []
  keras.utils.set_random_seed(0)
  summary = controller.run(
    task=tasks.regression(),
    options=tasks.run_options(tmp_path),
    strategy=tf.distribute.get_strategy(),
    loop_actions=[lambda step, result: seen.append((step, result))],
  )
  board = tmp_path / "tensorboard"
  train = read_scalars(str(board / "train"))
  validation = read_scalars(str(board / "validation"))
  assert [step for step, _ in train["mae"]] == [5, 10, 15, 20]
  assert [step for step, _ in validation["mae"]] == [10, 20]
  assert summary["train_mae"] == pytest.approx(train["mae"][-1][1])
  assert summary["eval_mae"] == pytest.approx(validation["mae"][-1][1])
  assert summary["eval_loss"] == pytest.approx(validation["loss"][-1][1])
  assert [step for step, _ in seen] == [5, 10, 15, 20]
  results = dict(seen)
  assert set(results[20].metrics) == {"loss", "mae"}
  assert results[20].metrics["mae"] == pytest.approx(summary["train_mae"])
  # Step 10's evaluation ran before its actions; the last one, at the end.
  assert results[10].eval_metrics["mae"] == pytest.approx(
    validation["mae"][0][1]
  )
  assert results[5].eval_metrics == {}
  # The regression learned: its error fell.
  assert train["mae"][-1][1] < train["mae"][0][1]
  # The ledger records each evaluation by name; ctl-report shows the last.
  (attempt,) = ledger_reader.read(str(tmp_path / "ledger"))
  evaluated = [e for e in attempt if e["event"] == "evaluated"]
  assert [e["step"] for e in evaluated] == [10, 20]
  assert evaluated[-1]["metrics"]["mae"] == summary["eval_mae"]
  assert report.last_evaluation([attempt]) == (
    f"Last evaluation: step 20: loss {summary['eval_loss']:.4f}, "
    f"mae {summary['eval_mae']:.4f} (64 examples)."
  )
