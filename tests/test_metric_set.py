"""ctl.train.metric_set: the task's metrics by name, from sums and counts,
everywhere a run reports (the log, TensorBoard, the summary, the actions)."""

import dataclasses
import re

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


class _Maximum(keras.metrics.Metric):
  """The largest prediction seen, its variable declared as Keras's default
  (aggregation "sum"): over four loops ctl once reported four maxima
  summed."""

  def __init__(self):
    super().__init__(name="maximum")
    self.largest = self.add_variable((), "zeros", name="largest")

  def update_state(self, y_true, y_pred, sample_weight=None):
    self.largest.assign(tf.maximum(self.largest, tf.reduce_max(y_pred)))

  def result(self):
    return self.largest


def _traced(build_metrics, output: ctl.StepOutput) -> None:
  """Traces the metrics' update from a step output of these specs, as the
  first loop's trace does (nothing runs on a device)."""
  metrics = metric_set.MetricSet(
    build_metrics, strategy=tf.distribute.get_strategy()
  )
  update = tf.function(metrics.update_states)
  update.get_concrete_function(output)


def _spec(dtype, *shape):
  return tf.TensorSpec(shape, dtype)


def test_a_running_maximum_is_refused_before_step_0(tmp_path):
  task = tasks.regression(build_metrics=lambda: {"top": _Maximum()})
  with pytest.raises(ctl.UserError) as raised:
    controller.run(
      task=task,
      options=tasks.run_options(tmp_path),
      strategy=tf.distribute.get_strategy(),
    )
  assert re.fullmatch(
    r"Metric 'top' cannot be summed across replicas and loops: its state "
    r"largest was [0-9.]+ after two batches but [0-9.]+ \+ [0-9.]+ after one "
    r"each, so it is not a sum of per-example parts \(a maximum, a last "
    r"value…\)\.",
    str(raised.value),
  )
  assert tasks.written(tmp_path) == []


@pytest.mark.parametrize(
  "metric, y_true, y_pred",
  [
    (keras.metrics.MeanAbsoluteError, _spec(tf.float32, None, 1), None),
    (
      lambda: keras.metrics.AUC(from_logits=True),
      _spec(tf.int32, None),
      _spec(tf.float32, None),
    ),
    (
      keras.metrics.SparseCategoricalAccuracy,
      _spec(tf.int64, 32),
      _spec(tf.float32, 32, 10),
    ),
  ],
  ids=["mae", "auc", "sparse_accuracy"],
)
def test_keras_metrics_are_proved_sums(metric, y_true, y_pred):
  _traced(
    lambda: {"m": metric()},
    ctl.StepOutput(
      per_example_loss=_spec(tf.float32, y_true.shape[0]),
      y_true=y_true,
      y_pred=y_pred or y_true,
      sample_weight=_spec(tf.float32, y_true.shape[0]),
    ),
  )


def test_a_mean_of_a_steps_own_value_is_a_proved_sum():
  _traced(
    lambda: {"aux": keras.metrics.Mean(), "mae": _mae_on("head")},
    ctl.StepOutput(
      per_example_loss=_spec(tf.float32, None),
      y_true={"head": _spec(tf.float32, None)},
      y_pred={"head": _spec(tf.float32, None)},
      values={"aux": _spec(tf.float32, None)},
    ),
  )


def _mae_on(output: str) -> ctl.OnOutput:
  return ctl.OnOutput(output, keras.metrics.MeanAbsoluteError())


def test_a_last_value_whose_variable_says_mean_is_refused_when_traced():
  class Last(keras.metrics.Metric):
    def __init__(self):
      super().__init__(name="last")
      self.value = self.add_variable((), "zeros", aggregation="mean")

    def update_state(self, value, sample_weight=None):
      self.value.assign(tf.reduce_mean(value))

    def result(self):
      return self.value

  with pytest.raises(ctl.UserError, match="'last' cannot be summed"):
    _traced(
      lambda: {"last": Last()},
      ctl.StepOutput(
        per_example_loss=_spec(tf.float32, None),
        values={"last": _spec(tf.float32, None)},
      ),
    )


def test_a_metric_the_probe_cannot_feed_is_taken_as_a_sum(caplog):
  class Positive(keras.metrics.Mean):
    """A mean that refuses the probe's labels (zeros)."""

    def update_state(self, y_true, y_pred, sample_weight=None):
      tf.debugging.assert_positive(y_true)
      super().update_state(y_pred, sample_weight)

  _traced(
    lambda: {"positive": Positive()},
    ctl.StepOutput(
      per_example_loss=_spec(tf.float32, None),
      y_true=_spec(tf.int32, None),
      y_pred=_spec(tf.float32, None),
    ),
  )
  assert "Metric 'positive' could not be probed" in caplog.text
