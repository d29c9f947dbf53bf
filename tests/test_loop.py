"""ctl.train.loop: the step computes the global-batch loss, and replicas agree."""

import json
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from ctl.resilience import faults
from ctl.train import loop as loop_lib
from ctl.train import metric_set
from ctl.train import step as step_lib
from trainer.testing import run_command

IMAGE_SHAPE = (6, 6, 3)
NUM_CLASSES = 3
BATCH = 8


def _model(seed=0):
  """A tiny deterministic classifier with a regularization loss."""
  keras.utils.set_random_seed(seed)
  inputs = keras.Input(IMAGE_SHAPE)
  x = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
  x = keras.layers.GlobalAveragePooling2D()(x)
  logits = keras.layers.Dense(
    NUM_CLASSES, kernel_regularizer=keras.regularizers.L2(0.05)
  )(x)
  return keras.Model(inputs, logits)


def _data(count, seed=0):
  rng = np.random.RandomState(seed)
  images = rng.uniform(size=(count, *IMAGE_SHAPE)).astype(np.float32)
  labels = rng.randint(NUM_CLASSES, size=count).astype(np.int64)
  return images, labels


def _accuracy_metric(strategy=None):
  return metric_set.MetricSet(
    metric_set.sparse_accuracy,
    strategy=strategy or tf.distribute.get_strategy(),
  )


def _accuracy(loop, output):
  """The loop's train accuracy, or None when it counts none."""
  if output.metric_state is None:
    return None
  return loop.metrics.results(output.metric_state)["accuracy"]


def _loop(model, steps_per_loop=4, train_metrics=True, loss_hook=None):
  strategy = tf.distribute.get_strategy()
  optimizer = keras.optimizers.Adam(0.05)
  optimizer.build(model.trainable_variables)
  step = tf.Variable(0, dtype=tf.int64, trainable=False)
  loop = loop_lib.TrainLoop(
    strategy=strategy,
    model=model,
    optimizer=optimizer,
    global_step=step,
    global_batch_size=BATCH,
    steps_per_loop=steps_per_loop,
    metrics=_accuracy_metric(strategy),
    train_metrics=train_metrics,
    loss_hook=loss_hook,
  )
  return loop, step


def _iterator(images, labels):
  dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(BATCH)
  return iter(
    tf.distribute.get_strategy().experimental_distribute_dataset(dataset)
  )


def _expected_loss_and_accuracy(model, images, labels):
  logits = model(images, training=True)
  per_example = step_lib.sparse_softmax_cross_entropy(labels, logits).numpy()
  regularization = float(tf.add_n(model.losses))
  accuracy = np.mean(np.argmax(logits.numpy(), axis=-1) == labels)
  return per_example.mean() + regularization, accuracy


def test_each_step_reports_the_mean_loss_plus_regularization():
  model = _model()
  loop, step = _loop(model)
  images, labels = _data(4 * BATCH)
  iterator = _iterator(images, labels)
  before = [w.numpy() for w in model.trainable_variables]
  for i in range(3):
    batch = slice(i * BATCH, (i + 1) * BATCH)
    loss, accuracy = _expected_loss_and_accuracy(
      model, images[batch], labels[batch]
    )
    output = loop.train(iterator, 1)
    assert output.step_losses.shape == (1,)
    np.testing.assert_allclose(output.step_losses[0], loss, rtol=1e-5)
    assert _accuracy(loop, output) == pytest.approx(accuracy)
    assert not output.stop_requested and not output.save_requested
    assert int(step.numpy()) == i + 1
  assert not np.allclose(before[0], model.trainable_variables[0].numpy())


def test_a_new_iterator_is_read_from_its_first_batch():
  # The loop keeps the trace it called last; a new iterator must be used.
  model = _model()
  loop, _ = _loop(model)
  images, labels = _data(2 * BATCH)
  loop.train(_iterator(images, labels), 1)
  other_images, other_labels = _data(BATCH, seed=7)
  expected, _ = _expected_loss_and_accuracy(model, other_images, other_labels)
  output = loop.train(_iterator(other_images, other_labels), 1)
  np.testing.assert_allclose(output.step_losses[0], expected, rtol=1e-5)


def test_a_call_runs_at_most_steps_per_loop_steps():
  loop, _ = _loop(_model())
  with pytest.raises(ValueError, match="num_steps"):
    loop.train(_iterator(*_data(BATCH)), 5)


def test_several_steps_in_one_call_are_the_same_as_one_at_a_time():
  images, labels = _data(6 * BATCH)
  results = []
  for steps_per_call in (1, 3):
    model = _model()
    loop, step = _loop(model)
    iterator = _iterator(images, labels)
    losses = np.concatenate(
      [
        loop.train(iterator, steps_per_call).step_losses
        for _ in range(6 // steps_per_call)
      ]
    )
    assert int(step.numpy()) == 6
    results.append((losses, [w.numpy() for w in model.trainable_variables]))
  np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
  for a, b in zip(results[0][1], results[1][1]):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
  "steps_per_loop,train_metrics", [(1, True), (4, False)]
)
def test_a_one_step_loop_and_a_loop_without_metrics_train_the_same(
  steps_per_loop, train_metrics
):
  # steps_per_loop=1 traces one step without a tf.range loop; without train
  # accuracy no correct predictions are counted. Neither changes training.
  images, labels = _data(3 * BATCH)
  results = []
  for kwargs in (
    {},
    dict(steps_per_loop=steps_per_loop, train_metrics=train_metrics),
  ):
    model = _model()
    loop, step = _loop(model, **kwargs)
    iterator = _iterator(images, labels)
    outputs = [loop.train(iterator, 1, stop_requested=i == 2) for i in range(3)]
    assert int(step.numpy()) == 3
    assert [o.stop_requested for o in outputs] == [False, False, True]
    outputs = [(o, _accuracy(loop, o)) for o in outputs]
    results.append((outputs, [w.numpy() for w in model.trainable_variables]))
  (reference, reference_weights), (outputs, weights) = results
  np.testing.assert_allclose(
    [o.step_losses for o, _ in outputs],
    [o.step_losses for o, _ in reference],
    rtol=1e-6,
  )
  for a, b in zip(weights, reference_weights):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  assert [a for _, a in outputs] == (
    [a for _, a in reference] if train_metrics else [None] * 3
  )
  assert all(0 <= a <= 1 for _, a in reference)


def test_nan_fault_fires_at_its_global_step_only():
  model = _model()
  injector = faults.Injector(faults.parse("nan@4"))
  loop, _ = _loop(model, loss_hook=injector.loss_hook())
  iterator = _iterator(*_data(8 * BATCH))
  loop.train(iterator, 2)
  losses = loop.train(iterator, 4).step_losses
  assert np.isnan(losses).tolist() == [False, False, True, False]
  assert all(np.isfinite(w.numpy()).all() for w in model.trainable_variables)


def _op_types(loop, iterator) -> set[str]:
  """Every op type of the traced train loop, its functions included."""
  loop.trace(iterator)
  graph = loop._traced.graph.as_graph_def()  # pylint: disable=protected-access
  types = {node.op for node in graph.node}
  for function in graph.library.function:
    types.update(node.op for node in function.node_def)
  return types


def test_without_faults_the_compiled_step_holds_no_fault_op():
  # Without metrics, whose updates may use the same op types (SelectV2).
  iterator = _iterator(*_data(BATCH))
  plain = _op_types(_loop(_model(), train_metrics=False)[0], iterator)
  hooked = _op_types(
    _loop(
      _model(),
      train_metrics=False,
      loss_hook=faults.Injector(faults.parse("nan@3")).loss_hook(),
    )[0],
    iterator,
  )
  assert {"SelectV2", "LogicalOr"} <= hooked - plain  # The NaN hook's ops.
  assert not plain & {
    "SelectV2",
    "Select",
    "LogicalOr",
    "PyFunc",
    "EagerPyFunc",
  }


@pytest.mark.parametrize(
  "stop,save", [(True, False), (False, True), (True, True)]
)
def test_stop_and_save_requests_come_back_agreed(stop, save):
  model = _model()
  loop, _ = _loop(model)
  output = loop.train(
    _iterator(*_data(BATCH)), 1, stop_requested=stop, save_requested=save
  )
  assert (output.stop_requested, output.save_requested) == (stop, save)


def test_host_seconds_come_back_in_this_workers_slot():
  loop, _ = _loop(_model())
  output = loop.train(_iterator(*_data(BATCH)), 1, host_seconds=0.25)
  np.testing.assert_allclose(output.host_seconds, [0.25])
  assert not output.stop_requested and not output.save_requested


def test_evaluate_counts_every_example_of_partial_and_empty_batches():
  model = _model()  # No optimizer: evaluation needs only the model.
  loop = loop_lib.EvalLoop(
    strategy=tf.distribute.get_strategy(),
    model=model,
    metrics=_accuracy_metric(),
  )
  images, labels = _data(2 * BATCH + 3, seed=1)
  batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(BATCH)
  # A replica whose share of the last global batch is empty gets this.
  empty = tf.data.Dataset.from_tensors((images[:0], labels[:0]))
  dataset = tf.distribute.get_strategy().experimental_distribute_dataset(
    empty.concatenate(batches).concatenate(empty)
  )
  metrics = loop.evaluate(dataset)
  logits = model(images, training=False)
  assert metrics["examples"] == len(labels)
  assert metrics["loss"] == pytest.approx(
    float(np.mean(step_lib.sparse_softmax_cross_entropy(labels, logits))),
    rel=1e-5,
  )
  assert metrics["accuracy"] == pytest.approx(
    np.mean(np.argmax(logits.numpy(), -1) == labels)
  )


# Runs in a fresh interpreter: logical devices must be configured before
# TensorFlow initializes, which the pytest process has already done.
_REPLICAS_SCRIPT = r"""
import json, sys
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
from ctl.data import input as input_lib
from ctl.resilience import faults
from ctl.train import loop as loop_lib
from trainer import data as data_lib
from trainer import model as model_lib

GLOBAL_BATCH, STEPS, STEPS_PER_LOOP = 16, 8, 2
source = data_lib.load("digits", image_size=12)


def train(strategy):
  keras.utils.set_random_seed(1)
  with strategy.scope():
    model = model_lib.build_model(name="small_cnn", num_classes=10,
                                  image_shape=source.image_shape, dropout=0.0)
    dropouts = [l for l in model.layers
                if isinstance(l, keras.layers.Dropout)]
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64, trainable=False,
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
  loop = loop_lib.TrainLoop(strategy=strategy, model=model,
                            optimizer=optimizer, global_step=step,
                            global_batch_size=GLOBAL_BATCH,
                            steps_per_loop=STEPS_PER_LOOP)
  train_data = strategy.distribute_datasets_from_function(
      lambda context: input_lib.train_dataset(
          records=source.train_records, num_records=source.num_train,
          decode_fn=source.decode_fn, input_context=context,
          global_batch_size=GLOBAL_BATCH, seed=3, start_step=0))
  iterator = iter(train_data)
  losses = []
  for _ in range(STEPS // STEPS_PER_LOOP):
    losses.extend(loop.train(iterator, STEPS_PER_LOOP).step_losses.tolist())
  eval_data = strategy.distribute_datasets_from_function(
      lambda context: input_lib.eval_dataset(
          records=source.eval_records, decode_fn=source.decode_fn,
          input_context=context, global_batch_size=GLOBAL_BATCH))
  weights = [v.numpy() for v in model.trainable_variables]
  return {"replicas": strategy.num_replicas_in_sync, "losses": losses,
          "eval": loop_lib.EvalLoop(strategy=strategy, model=model).evaluate(
              eval_data), "dropouts": len(dropouts),
          "step": int(step.numpy())}, weights


one, one_weights = train(tf.distribute.OneDeviceStrategy("/cpu:0"))
two, two_weights = train(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
np.savez(sys.argv[1], *one_weights, *two_weights)
print(json.dumps({"one": one, "two": two, "num_weights": len(one_weights)}))
"""


@pytest.mark.processes
def test_two_replicas_match_one_replica_with_the_same_global_batch(tmp_path):
  """Two CPU replicas, each with half of every global batch, train the same.

  small_cnn is built without Dropout for this comparison: a dropout mask is
  drawn per replica for its half batch, so it cannot equal the mask one
  replica draws for the whole batch (the random stream, not the loop, would
  differ). Everything else is compared: the input split, the loss averaged
  over the global batch, the reduced loss, the gradient all-reduce feeding
  the optimizer, and evaluation with an empty last batch on one replica.
  """
  weights_file = str(tmp_path / "weights.npz")
  result = run_command([sys.executable, "-c", _REPLICAS_SCRIPT, weights_file])
  report = json.loads(result.stdout.strip().splitlines()[-1])
  one, two = report["one"], report["two"]
  assert (one["replicas"], two["replicas"]) == (1, 2)
  assert one["dropouts"] == 0 and one["step"] == two["step"] == 8
  np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-5)
  # It really trained: the updates change the loss (8 steps are too few for
  # it to fall reliably; it depends on the data order).
  assert len(set(one["losses"])) == len(one["losses"])
  assert two["eval"]["examples"] == one["eval"]["examples"] == 359
  assert two["eval"]["loss"] == pytest.approx(one["eval"]["loss"], rel=1e-4)

  weights = np.load(weights_file)
  count = report["num_weights"]
  assert len(weights.files) == 2 * count
  for i in range(count):
    np.testing.assert_allclose(
      weights[f"arr_{count + i}"], weights[f"arr_{i}"], rtol=1e-4, atol=1e-5
    )
