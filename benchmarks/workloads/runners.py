"""The three ways to train that the throughput benchmark compares.

- `EngineRunner`: our engine, `ctl.train.loop.TrainLoop`, `steps_per_loop` steps
  per call (the host is touched once per call).
- `BareRunner`: a bare `tf.function` GradientTape step called once per step,
  no framework around it: the overhead floor a hand-written loop reaches;
  or, with `steps_per_loop` > 1, the same step in a bare `tf.range` loop.
- `FitRunner`: Keras `model.fit`, what users would pick instead.

All of them train the same model (same variables, same optimizer) on the same
in-memory batch, distributed by the same strategy, so only the loop around
the step differs. Each `run(num_steps)` blocks until the steps are done and
returns the seconds they took.
"""

import contextlib
import dataclasses
import time

import keras
import tensorflow as tf

from benchmarks.harness import device as device_lib
from ctl.data import input as input_lib
from ctl.train import loop as loop_lib
from ctl.train import metric_set
from ctl.train import optimizers
from ctl.train import step as step_lib
from trainer import data as data_lib
from trainer import model as model_lib


@dataclasses.dataclass(frozen=True)
class ModelGroup:
  """A model and its optimizer, built under one mixed-precision policy.

  Runners of the same precision share a group (and so its variables); XLA
  and non-XLA runners do too, as XLA changes the compiled step, not the model.
  """

  model: keras.Model
  optimizer: keras.optimizers.Optimizer
  global_step: tf.Variable
  precision: str


@contextlib.contextmanager
def precision_policy(precision: str):
  """Sets the Keras global dtype policy for `precision`, then restores it."""
  previous = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_global_policy(device_lib.POLICIES[precision])
  try:
    yield
  finally:
    keras.mixed_precision.set_global_policy(previous)


def synthetic_batch(
  *, image_size: int, batch_size: int
) -> tuple[tf.data.Dataset, int]:
  """One batch of the trainer's synthetic data, repeated forever.

  Building the batch once keeps the input pipeline out of the measurement:
  every step gets the same in-memory tensors.

  Returns:
    (dataset of (images, labels) batches, number of classes).
  """
  source = data_lib.load("synthetic", image_size=image_size)
  batch = next(
    iter(
      input_lib.eval_dataset(
        records=source.train_records,
        decode_fn=source.decode_fn,
        input_context=tf.distribute.InputContext(),
        global_batch_size=batch_size,
      )
    )
  )
  return tf.data.Dataset.from_tensors(batch).repeat(), source.num_classes


def build_group(
  *,
  strategy: tf.distribute.Strategy,
  model_name: str,
  image_size: int,
  num_classes: int,
  precision: str,
  optimizer: str = "adam",
  learning_rate: float = 1e-3,
) -> ModelGroup:
  """Builds the trainer's model and a built optimizer under `strategy`."""
  with precision_policy(precision), strategy.scope():
    model = model_lib.build_model(
      name=model_name,
      num_classes=num_classes,
      image_shape=(image_size, image_size, 3),
    )
    opt = (
      optimizers.Adam(learning_rate)
      if optimizer == "adam"
      else optimizers.SGD(learning_rate, momentum=0.9)
    )
    if precision == "fp16":
      opt = keras.optimizers.LossScaleOptimizer(opt)
    opt.build(model.trainable_variables)
    global_step = tf.Variable(
      0,
      name="global_step",
      trainable=False,
      dtype=tf.int64,
      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )
  return ModelGroup(
    model=model, optimizer=opt, global_step=global_step, precision=precision
  )


def train_loop(
  *,
  strategy,
  group: ModelGroup,
  global_batch_size: int,
  steps_per_loop: int,
  xla: bool,
  train_accuracy: bool = True,
) -> loop_lib.TrainLoop:
  """The engine's compiled loops for `group`, up to `steps_per_loop` a call,
  with the trainer's one train metric, its accuracy (`train_accuracy`)."""
  return loop_lib.TrainLoop(
    strategy=strategy,
    model=group.model,
    optimizer=group.optimizer,
    global_step=group.global_step,
    global_batch_size=global_batch_size,
    steps_per_loop=steps_per_loop,
    jit_compile=xla,
    metrics=metric_set.MetricSet(metric_set.sparse_accuracy, strategy=strategy),
    train_metrics=train_accuracy,
  )


class EngineRunner:
  """`ctl.train.loop.TrainLoop`: `steps_per_loop` steps per `tf.function` call.

  Runners that differ only in `steps_per_loop` (more than 1) may share one
  `TrainLoop` built for the largest: the step count of a call is a tensor
  argument, so one trace serves them all (ResNet50 takes tens of seconds to
  trace on a CPU); a call of fewer steps only leaves part of its loss buffer
  unused. `steps_per_loop=1` gets a `TrainLoop` of its own, traced without a
  `tf.range` loop, as users get it.
  """

  def __init__(
    self, *, strategy, loop: loop_lib.TrainLoop, dataset, steps_per_loop: int
  ):
    self.warmup_steps = 1  # num_steps is a tensor: one call traces it all.
    self._steps_per_loop = steps_per_loop
    self._loop = loop
    self._iterator = iter(strategy.experimental_distribute_dataset(dataset))

  def run(self, num_steps: int) -> float:
    start = time.perf_counter()
    done = 0
    while done < num_steps:
      steps = min(self._steps_per_loop, num_steps - done)
      self._loop.train(self._iterator, steps)  # Returns host values: synced.
      done += steps
    return time.perf_counter() - start


class BareRunner:
  """A bare GradientTape step in a `tf.function`, called once per step.

  It computes the same loss as the engine, applies the same optimizer and,
  with `train_accuracy`, updates the same accuracy metric (as the seed
  tutorial's hand-written step does); with `xla` it compiles the same part
  (forward and backward), so the difference to `EngineRunner` is the
  framework around the step and nothing else. With `steps_per_loop` > 1 the
  step runs in a bare `tf.range` loop instead, the floor for the engine's
  compiled loop.
  """

  def __init__(
    self,
    *,
    strategy,
    group: ModelGroup,
    dataset,
    global_batch_size: int,
    xla: bool,
    steps_per_loop: int = 1,
    train_accuracy: bool = True,
  ):
    self.warmup_steps = 1
    self._steps_per_loop = steps_per_loop
    model, optimizer = group.model, group.optimizer
    accuracy = None
    if train_accuracy:
      with strategy.scope():
        accuracy = keras.metrics.SparseCategoricalAccuracy()

    def gradients(images, labels):
      with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.nn.compute_average_loss(
          step_lib.sparse_softmax_cross_entropy(labels, logits),
          global_batch_size=global_batch_size,
        )
        scaled_loss = optimizer.scale_loss(loss)
      grads = tape.gradient(scaled_loss, model.trainable_variables)
      return loss, logits, grads

    compiled = tf.function(gradients, jit_compile=True) if xla else gradients

    def replica_step(images, labels):
      loss, logits, grads = compiled(images, labels)
      optimizer.apply_gradients(zip(grads, model.trainable_variables))
      if accuracy is not None:
        accuracy.update_state(labels, logits)
      return loss

    @tf.function
    def step(iterator):
      return strategy.run(replica_step, args=next(iterator))

    @tf.function
    def loop(iterator, num_steps):
      loss = tf.zeros([])
      for _ in tf.range(num_steps):
        loss = strategy.experimental_local_results(
          strategy.run(replica_step, args=next(iterator))
        )[0]
      return loss

    self._step = step
    self._loop = loop
    self._iterator = iter(strategy.experimental_distribute_dataset(dataset))

  def run(self, num_steps: int) -> float:
    start = time.perf_counter()
    loss = None
    if self._steps_per_loop == 1:
      for _ in range(num_steps):
        loss = self._step(self._iterator)
    else:
      for done in range(0, num_steps, self._steps_per_loop):
        loss = self._loop(
          self._iterator,
          tf.constant(min(self._steps_per_loop, num_steps - done)),
        )
    float(loss)  # Waits for the last step (devices may run asynchronously).
    return time.perf_counter() - start


class FitRunner:
  """Keras `model.fit` with `steps_per_execution`, as users call it.

  It compiles a second functional model over the same layers (so the same
  variables), with the same optimizer, the same loss and an accuracy metric
  (the engine counts correct predictions too). Time runs from the first
  batch's start to the end of the epoch, measured by a callback: the setup
  `fit` does on every call is left out, which favours `fit`.
  """

  def __init__(
    self,
    *,
    strategy,
    group: ModelGroup,
    dataset,
    steps_per_execution: int,
    xla: bool,
  ):
    self.warmup_steps = steps_per_execution  # One whole execution.
    self._dataset = dataset
    with precision_policy(group.precision), strategy.scope():
      self._model = keras.Model(group.model.inputs, group.model.outputs)
      self._model.compile(
        optimizer=group.optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
        jit_compile=xla,
      )
    self._timer = _EpochTimer()

  def run(self, num_steps: int) -> float:
    self._model.fit(
      self._dataset,
      epochs=1,
      steps_per_epoch=num_steps,
      verbose=0,
      shuffle=False,
      callbacks=[self._timer],
    )
    return self._timer.seconds


class _EpochTimer(keras.callbacks.Callback):
  """First batch start -> epoch end (after Keras syncs the epoch's logs).

  It defines no batch-end hook, so `fit` keeps dispatching batch callbacks
  asynchronously, as it does for users with the default callbacks.
  """

  def __init__(self):
    super().__init__()
    self._start = None
    self.seconds = 0.0

  def on_epoch_begin(self, epoch, logs=None):
    self._start = None

  def on_train_batch_begin(self, batch, logs=None):
    if self._start is None:
      self._start = time.perf_counter()

  def on_epoch_end(self, epoch, logs=None):
    self.seconds = time.perf_counter() - self._start
