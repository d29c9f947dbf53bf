"""ctl.train.step: the task's step; a step, a batch or a task that cannot
work is one sentence (UserError) before anything is written."""

import dataclasses
import os
import re
import sys
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import ctl
from ctl import errors
from ctl.errors import UserError
from ctl.train import controller
from tests import tasks
from trainer.testing import run_command


def _run(model_dir, task, **options):
  return controller.run(
    task=task,
    options=tasks.run_options(model_dir, **options),
    strategy=tf.distribute.get_strategy(),
  )


def _refused(tmp_path, task, match, **options):
  """The run raises UserError matching `match` and leaves no result."""
  with pytest.raises(UserError, match=match) as raised:
    _run(tmp_path, task, **options)
  assert "\n" not in str(raised.value)  # One sentence, no traceback text.
  assert tasks.written(tmp_path) == []


def test_a_reduced_loss_is_refused_before_the_first_step(tmp_path):
  # keepdims=True: one value for the batch would silently divide the loss and
  # the gradients by the global batch.
  reduced = lambda y, p: tf.reduce_mean(tf.square(y - p), keepdims=True)
  _refused(tmp_path, tasks.regression(loss_fn=reduced), r"shape \[batch\]")


def test_batches_of_another_size_than_the_global_batch_are_refused(tmp_path):
  task = tasks.regression()
  doubled = dataclasses.replace(task, global_batch_size=tasks.BATCH // 2)
  _refused(tmp_path, doubled, "yields batches of 16")


# Three replicas need three devices, configured before TensorFlow starts:
# a fresh interpreter (the pytest worker's TensorFlow has started).
_THREE_REPLICAS = r"""
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 3)
from ctl.errors import UserError
from ctl.train import controller
from tests import tasks
strategy = tf.distribute.MirroredStrategy(
    [d.name for d in tf.config.list_logical_devices("CPU")])
try:
  controller.run(task=tasks.regression(),
                 options=tasks.run_options(sys.argv[1]), strategy=strategy)
except UserError as e:
  print(f"UserError: {e}")
"""


@pytest.mark.processes
def test_a_global_batch_the_replicas_cannot_share_is_one_sentence(tmp_path):
  # ctl.data.input's dataset functions divide the global batch by the
  # replicas too: TensorFlow's ValueError there must not come first (a
  # script fine on 2 workers was a traceback on 3, restarted 6 times).
  result = run_command([sys.executable, "-c", _THREE_REPLICAS, str(tmp_path)])
  assert result.stdout.splitlines()[-1:] == [
    f"UserError: Task.global_batch_size={tasks.BATCH} must be a multiple of "
    "the 3 replicas."
  ], result.stderr[-3000:]
  assert tasks.written(tmp_path) == []


def test_inputs_that_do_not_fit_the_model_are_refused(tmp_path):
  wider = lambda: keras.Sequential(
    [keras.Input((tasks.FEATURES + 3,)), keras.layers.Dense(1)]
  )
  _refused(
    tmp_path, tasks.regression(build_model=wider), "cannot run on its training"
  )


def test_a_model_with_no_trainable_variable_is_refused(tmp_path):
  frozen = lambda: keras.Sequential([keras.Input((tasks.FEATURES,))])
  _refused(
    tmp_path, tasks.regression(build_model=frozen), "no trainable variable"
  )


def test_a_batch_of_another_structure_is_refused(tmp_path):
  task = tasks.regression()
  features_only = lambda context, step, seed: task.train_dataset_fn(
    context, step, seed
  ).map(lambda x, y: {"x": x})
  _refused(
    tmp_path,
    dataclasses.replace(task, train_dataset_fn=features_only),
    r"\(inputs, targets\)",
  )


def test_an_endless_evaluation_dataset_is_refused(tmp_path):
  task = tasks.regression()
  endless = lambda context: task.eval_dataset_fn(context).repeat()
  _refused(
    tmp_path, dataclasses.replace(task, eval_dataset_fn=endless), "endless"
  )


def test_a_finite_training_dataset_that_runs_out_is_one_sentence(tmp_path):
  task = tasks.regression()
  short = lambda context, step, seed: task.train_dataset_fn(
    context, step, seed
  ).take(7)
  with pytest.raises(UserError, match="ran out"):
    _run(tmp_path, dataclasses.replace(task, train_dataset_fn=short))


def test_a_metric_that_cannot_be_summed_is_refused(tmp_path):
  class Last(keras.metrics.Metric):
    """Keeps the last value: its state is not a sum."""

    def __init__(self):
      super().__init__(name="last")
      self.value = self.add_variable((), "zeros", aggregation="mean")

    def update_state(self, y_true, y_pred, sample_weight=None):
      self.value.assign(tf.reduce_mean(y_pred))

    def result(self):
      return self.value

  task = tasks.regression(build_metrics=lambda: {"last": Last()})
  _refused(tmp_path, task, "cannot be summed")


def test_a_serving_signature_that_does_not_match_the_model_is_refused(
  tmp_path,
):
  serving = ctl.Serving(
    fn=lambda model, inputs: {"y": model(inputs["x"])},
    input_signature={
      "x": tf.TensorSpec([None, tasks.FEATURES]),
      "z": tf.TensorSpec([None, 1]),
    },
  )
  _refused(tmp_path, tasks.regression(serving=serving), "input_signature")


@pytest.mark.parametrize(
  "spec, dtype",
  [
    ((None, tasks.FEATURES + 3), tf.float32),
    ((None, tasks.FEATURES), tf.string),
  ],
  ids=["another_width", "another_dtype"],
)
def test_a_serving_function_the_model_cannot_take_is_refused_before_step_0(
  tmp_path, spec, dtype
):
  # The structure matches; the model cannot take the tensors: found by
  # tracing the signature on the built model, not at the export after the
  # last step (or in a SavedModel no request can call).
  serving = ctl.Serving(
    fn=lambda model, inputs: {"y": model(inputs)},
    input_signature=tf.TensorSpec(spec, dtype),
  )
  _refused(
    tmp_path, tasks.regression(serving=serving), "Task.serving cannot serve"
  )


def test_a_model_with_a_list_of_outputs_serves_each_by_its_name(tmp_path):
  def two_heads():
    x = keras.Input((tasks.FEATURES,), name="x")
    value = keras.layers.Reshape((), name="value")(keras.layers.Dense(1)(x))
    spread = keras.layers.Reshape((), name="spread")(keras.layers.Dense(1)(x))
    return keras.Model(x, [value, spread])

  task = tasks.regression(
    build_model=two_heads,
    loss_fn=lambda y, y_pred: tf.square(y - y_pred[0]) + tf.square(y_pred[1]),
    build_metrics=lambda: {},
  )
  _run(tmp_path, task)
  served = tf.saved_model.load(str(tmp_path / "saved_model"))
  outputs = served.signatures["serving_default"](x=tf.ones([2, tasks.FEATURES]))
  assert sorted(outputs) == ["spread", "value"]
  assert outputs["value"].shape == [2]


def test_the_reported_loss_is_the_mean_weighted_loss_of_the_global_batch(
  tmp_path,
):
  # Batches (x, y, weight): the loss is weighted; doubling every weight
  # doubles it (the mean is over examples, as Keras's), with a learning rate
  # of 0 so that both runs see the same weights.
  def weighted(weight):
    task = tasks.regression()
    return dataclasses.replace(
      task,
      train_dataset_fn=lambda context, step, seed: task.train_dataset_fn(
        context, step, seed
      ).map(lambda x, y: (x, y, tf.fill(tf.shape(y), weight))),
      build_optimizer=lambda: keras.optimizers.SGD(0.0),
      build_metrics=None,
      serving=None,
    )

  losses = []
  for weight in (1.0, 2.0):
    keras.utils.set_random_seed(0)
    model_dir = tmp_path / str(weight)
    summary = _run(model_dir, weighted(weight), train_steps=5)
    losses.append(summary["train_loss"])
    assert not (model_dir / "saved_model").exists()  # serving=None.
  np.testing.assert_allclose(losses[1], 2 * losses[0], rtol=1e-5)


def test_a_task_that_branches_on_a_tensor_in_python_trains(tmp_path):
  # AutoGraph converts the task's code the loops call (docs/design.md, "The
  # step belongs to the task"), though ctl's own helpers are not converted:
  # a Python `if` on a tensor, in a loss_fn, a replica_step, a metric and a
  # function the step gives merge_call, becomes
  # graph control flow; unconverted, it is refused while tracing. Both
  # branches here change nothing, so the runs end as the plain task does.
  plain = tasks.regression(build_metrics=None, serving=None)

  def loss_fn(y, y_pred):
    error = tf.square(y - y_pred)
    if tf.reduce_max(error) < 0.0:  # Never: a square is not negative.
      error = -error
    return error

  def replica_step(context, batch):
    x, y = batch
    variables = context.model.trainable_variables
    with tf.GradientTape() as tape:
      output = ctl.StepOutput(per_example_loss=loss_fn(y, context.model(x)))
      loss = context.average_loss(output.per_example_loss)
    gradients = tape.gradient(loss, variables)
    if tf.math.is_finite(loss):  # Always here.
      context.optimizer.apply_gradients(zip(gradients, variables))
    return output

  def at_least_zero(strategy, loss):  # TensorFlow converts merge_call's fn.
    if loss < 0.0:  # Never.
      loss = -loss
    return loss

  def merged_step(context, batch):
    output = replica_step(context, batch)
    tf.distribute.get_replica_context().merge_call(
      at_least_zero, args=(context.average_loss(output.per_example_loss),)
    )
    return output

  class Error(keras.metrics.Mean):  # A metric of the task's own.
    def update_state(self, y, y_pred, sample_weight=None):
      error = tf.abs(y - y_pred)
      if tf.reduce_max(error) < 0.0:  # Never.
        error = -error
      super().update_state(error, sample_weight)

  losses = []
  for name, task in (
    ("plain", plain),
    ("loss_fn", dataclasses.replace(plain, loss_fn=loss_fn)),
    ("replica_step", dataclasses.replace(plain, replica_step=replica_step)),
    (
      "metric",
      dataclasses.replace(plain, build_metrics=lambda: {"e": Error()}),
    ),
    ("merge_call", dataclasses.replace(plain, replica_step=merged_step)),
  ):
    keras.utils.set_random_seed(0)
    losses.append(_run(tmp_path / name, task, train_steps=10)["train_loss"])
  np.testing.assert_allclose(losses[1:], [losses[0]] * 4, rtol=1e-6)


def test_a_step_that_cannot_run_names_the_op_and_the_shapes(tmp_path):
  # y_pred of another batch size: TensorFlow's message opens with AutoGraph's
  # "in user code:" and its frames; the sentence is the error at their end.
  halved = lambda y, y_pred: tf.square(y - y_pred[: tasks.BATCH // 2])
  with pytest.raises(UserError) as raised:
    _run(tmp_path, tasks.regression(loss_fn=halved))
  sentence = str(raised.value)
  assert "\n" not in sentence and "in user code" not in sentence, sentence
  assert "Dimensions must be equal, but are 16 and 8" in sentence, sentence
  assert "[16], [8]" in sentence, sentence
  assert tasks.written(tmp_path) == []


def test_an_error_from_a_running_graph_is_named_by_its_op_and_shapes():
  @tf.function(
    input_signature=[tf.TensorSpec([None, 1]), tf.TensorSpec([None, 1])]
  )
  def subtract(x, y):
    return x - y

  with pytest.raises(tf.errors.InvalidArgumentError) as raised:
    subtract(tf.ones([4, 1]), tf.ones([8, 1]))
  assert errors.error_sentence(raised.value) == (
    "Incompatible shapes: [4,1] vs. [8,1] (node sub)"
  )


def test_a_keras_layer_error_in_a_traced_function_is_named_by_the_layer():
  # AutoGraph's frames, then Keras's "Exception encountered when calling",
  # the layer's own error, and its arguments listed line by line (a
  # LossScaleOptimizer's "No gradients provided" reads the same way).
  class Picky(keras.layers.Layer):
    def call(self, x):
      raise ValueError("Picky wants 3 features, got 8.")

  picky = Picky()

  @tf.function
  def call(x):
    return picky(x)

  with pytest.raises(ValueError) as raised:
    call.get_concrete_function(tf.TensorSpec([None, 8]))
  assert "Arguments received" in str(raised.value)  # What it looked like.
  assert errors.error_sentence(raised.value) == (
    "Picky wants 3 features, got 8."
  )


def test_autograph_converts_the_tasks_code_and_none_of_ctls(
  tmp_path, monkeypatch
):
  # Every start of a worker pays for each function AutoGraph converts
  # (docs/design.md, "The step belongs to the task"): ctl's loops are built
  # without it, and only the task's own code is converted. AutoGraph writes
  # each function it converts to a file in the temporary directory.
  scratch = tmp_path / "tmp"
  scratch.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(scratch))

  def squared_error(y, y_pred):
    return tf.square(y - y_pred)

  task = tasks.regression(loss_fn=squared_error, serving=None)
  _run(tmp_path / "run", task)
  converted = set()
  for name in os.listdir(scratch):
    with open(scratch / name) as f:
      converted |= set(re.findall(r"^ *def tf__(\w+)\(", f.read(), re.M))
  assert converted == {"squared_error"}
