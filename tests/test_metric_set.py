"""ctl.train.metric_set: the task's metrics by name, from sums and counts,
everywhere a run reports (the log, TensorBoard, the summary, the actions)."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import ctl
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


def _two_heads(**metrics) -> "ctl.Task":
  """The regression with two heads by name (`value`, and `spread`: |y|),
  dict labels of the same names, and `metrics` as its metrics."""
  task = tasks.regression()

  def labelled(dataset):
    return dataset.map(lambda x, y: (x, {"value": y, "spread": tf.abs(y)}))

  def build_model():
    x = keras.Input((tasks.FEATURES,), name="x")
    heads = {
      name: keras.layers.Reshape((), name=name)(keras.layers.Dense(1)(x))
      for name in ("value", "spread")
    }
    return keras.Model(x, heads)

  return dataclasses.replace(
    task,
    build_model=build_model,
    train_dataset_fn=lambda *args: labelled(task.train_dataset_fn(*args)),
    eval_dataset_fn=lambda context: labelled(task.eval_dataset_fn(context)),
    loss_fn=lambda y, p: sum(tf.square(y[k] - p[k]) for k in y),
    build_metrics=lambda: metrics,
  )


def test_a_metric_bound_to_an_output_by_name_reads_that_head_exactly(
  tmp_path,
):
  keras.utils.set_random_seed(0)
  summary = controller.run(
    task=_two_heads(
      value_mae=ctl.OnOutput("value", keras.metrics.MeanAbsoluteError()),
      spread_mae=ctl.OnOutput("spread", keras.metrics.MeanAbsoluteError()),
    ),
    options=tasks.run_options(tmp_path),
    strategy=tf.distribute.get_strategy(),
  )
  # The same metric computed here on the evaluation records, head by head,
  # with the trained model as it was exported.
  x, y = tasks.eval_records()
  served = tf.saved_model.load(str(tmp_path / "saved_model"))
  outputs = served.signatures["serving_default"](x=tf.constant(x))
  for head, label in (("value", y), ("spread", np.abs(y))):
    expected = np.mean(np.abs(label - outputs[head].numpy()))
    assert summary[f"eval_{head}_mae"] == pytest.approx(expected, rel=1e-5)


def test_a_metric_bound_to_an_output_the_step_lacks_is_one_sentence(tmp_path):
  task = _two_heads(
    mae=ctl.OnOutput("valeu", keras.metrics.MeanAbsoluteError())
  )
  with pytest.raises(ctl.UserError) as raised:
    controller.run(
      task=task,
      options=tasks.run_options(tmp_path),
      strategy=tf.distribute.get_strategy(),
    )
  assert str(raised.value) == (
    "Metric 'mae' reads output 'valeu', but the step's y_pred has the keys "
    "['spread', 'value']; give ctl.OnOutput one of them."
  )
  assert tasks.written(tmp_path) == []
