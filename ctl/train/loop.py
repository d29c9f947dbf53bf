"""The training step and the compiled loops that run it.

This is the part a newcomer should find in under a minute: `_replica_step` is
the per-replica GradientTape step, `_train_loop` runs `steps_per_loop` of them
inside one `tf.function` (a `tf.range` loop, so the host is touched once per
loop) of `TrainLoop`, and `EvalLoop` runs over a finite validation set (it
needs no optimizer).

Loss contract (docs/design.md, "Contracts"): the per-example loss is averaged over the *global*
batch with `tf.nn.compute_average_loss`, regularization losses are scaled by
1/replicas, gradients are summed across replicas by the optimizer, and the
reported loss is `strategy.reduce(SUM, ...)` of the per-replica averages.
That reduce happens once per loop, not per step: each replica accumulates its
per-step losses and correct counts locally (sync-on-read variables), so the
only per-step communication is the gradient all-reduce.

Host cost per call is kept small (it is what `steps_per_loop=1` pays every
step): the constant arguments of a call are made once (only the worker's
host seconds, one float, are new each call), the traced function is called
directly (no per-call matching of arguments to traces), one call
returns one tensor (one device-to-host copy), and a loop of one step is not a
`tf.range` loop (a while op costs host time per call). Counting correct
predictions for the train accuracy can be switched off
(`train_accuracy=False`).
"""

from collections.abc import Callable
import dataclasses

import keras
import numpy as np
import tensorflow as tf

from ctl.distributed import worker_exchange


def sparse_softmax_cross_entropy(labels, logits):
  """Per-example cross entropy from float32 logits (mixed precision safe)."""
  return keras.losses.sparse_categorical_crossentropy(
    labels, tf.cast(logits, tf.float32), from_logits=True
  )


@dataclasses.dataclass(frozen=True)
class LoopOutput:
  """What one call of the train loop reports back to the host.

  Attributes:
    step_losses: the reduced (global-batch) loss of every step that ran.
    accuracy: training accuracy over the examples of this call; None when
      the loop does not count it (`train_accuracy=False`).
    stop_requested: some worker asked to stop (preemption) at this step.
    save_requested: the chief asked for a time-based checkpoint at this step.
    host_seconds: every worker's `host_seconds` of this call, by index in the
      cluster (the chief first); see `TrainLoop.train`.
  """

  step_losses: np.ndarray
  accuracy: float | None
  stop_requested: bool
  save_requested: bool
  host_seconds: np.ndarray


class TrainLoop:
  """The compiled train loop for one model under one strategy.

  Everything stateful (model, optimizer, global step) must have been created
  under `strategy.scope()`; the optimizer must be built (`optimizer.build`)
  so that no variable is created inside a `tf.function`.
  """

  def __init__(
    self,
    *,
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    global_step: tf.Variable,
    global_batch_size: int,
    steps_per_loop: int,
    loss_fn: Callable | None = None,
    jit_compile: bool = False,
    train_accuracy: bool = True,
    loss_hook: Callable | None = None,
  ):
    """Initializes the loop.

    Args:
      strategy: the distribution strategy the variables belong to.
      model: a Keras model mapping images to logits.
      optimizer: a built Keras optimizer (a LossScaleOptimizer for fp16).
      global_step: int64 variable incremented once per step.
      global_batch_size: examples per step summed over all replicas.
      steps_per_loop: the most steps one `train` call runs.
      loss_fn: `(labels, logits) -> per-example loss`; None: sparse
        softmax cross-entropy.
      jit_compile: compile the forward and backward pass with XLA. The
        optimizer update (which holds the cross-replica all-reduce) stays
        outside the XLA cluster, where collectives are always supported.
      train_accuracy: count correct predictions at every step, for
        `LoopOutput.accuracy`; False saves those few ops per step.
      loss_hook: test hook, `(loss, global_step) -> loss` (see ctl.resilience.faults);
        None keeps it out of the compiled step entirely.
    """
    self._strategy = strategy
    self._model = model
    self._optimizer = optimizer
    self._global_step = global_step
    self._global_batch_size = global_batch_size
    self._steps_per_loop = steps_per_loop
    self._loss_fn = loss_fn or sparse_softmax_cross_entropy
    self._loss_hook = loss_hook
    with strategy.scope():
      self._step_losses = _replica_accumulator([steps_per_loop])
      self._correct = _replica_accumulator([]) if train_accuracy else None
    self._gradients = (
      tf.function(self._loss_and_gradients, jit_compile=True)
      if jit_compile
      else (self._loss_and_gradients)
    )
    self._train = tf.function(self._train_loop)
    self._traced = self._traced_for = None  # The trace; the iterator it read.
    # Arguments of `train` made once: a new tensor per call costs host time.
    self._num_steps = {}
    self._controls = {
      (stop, save): tf.constant([float(stop), float(save)])
      for stop in (False, True)
      for save in (False, True)
    }
    self._num_workers, self._host_slot = _host_slot(strategy)

  def _loss_and_gradients(self, images, labels):
    with tf.GradientTape() as tape:
      logits = self._model(images, training=True)
      per_example = self._loss_fn(labels, logits)
      loss = tf.nn.compute_average_loss(
        per_example, global_batch_size=self._global_batch_size
      )
      if self._model.losses:
        loss += tf.nn.scale_regularization_loss(tf.add_n(self._model.losses))
      if self._loss_hook:
        loss = self._loss_hook(loss, self._global_step)
      scaled_loss = self._optimizer.scale_loss(loss)
    variables = self._model.trainable_variables
    gradients = tape.gradient(scaled_loss, variables)
    correct = (
      _count_correct(labels, logits) if self._correct is not None else None
    )
    return loss, correct, gradients

  def _replica_step(self, batch, index):
    images, labels = batch
    loss, correct, gradients = self._gradients(images, labels)
    self._optimizer.apply_gradients(
      zip(gradients, self._model.trainable_variables)
    )
    # Local bookkeeping only: no communication per step beyond the gradients.
    self._step_losses.assign_add(
      tf.scatter_nd(  # Not one_hot * loss: NaN * 0.
        [[index]], [loss], [self._steps_per_loop]
      )
    )
    if self._correct is not None:
      self._correct.assign_add(correct)

  def _train_loop(self, iterator, num_steps, control, host_seconds):
    strategy = self._strategy
    strategy.run(_zero, args=self._accumulators())
    # One step needs no loop: a while op costs host time on every call.
    for i in range(1) if self._steps_per_loop == 1 else tf.range(num_steps):
      strategy.run(self._replica_step, args=(next(iterator), i))
      self._global_step.assign_add(1)
    # The loop's one extra all-reduce: [step losses..., correct, host seconds
    # per worker..., requests]. Summing the requests tells every worker
    # whether any worker was asked to stop, or the chief wants a time-based
    # save, so all of them take the same decision at the same step; each
    # worker's host seconds fill its own slot, so the sum holds everyone's.
    return strategy.reduce(
      "SUM",
      strategy.run(
        lambda: tf.concat(
          [
            self._step_losses.read_value(),
            *(
              [[self._correct.read_value()]]
              if self._correct is not None
              else []
            ),
            self._host_slot * host_seconds,
            control,
          ],
          0,
        )
      ),
      axis=None,
    )

  def _accumulators(self) -> tuple[tf.Variable, ...]:
    return (self._step_losses,) + (
      (self._correct,) if self._correct is not None else ()
    )

  def train(
    self,
    iterator,
    num_steps: int,
    *,
    stop_requested: bool = False,
    save_requested: bool = False,
    host_seconds: float = 0.0,
  ) -> LoopOutput:
    """Runs `num_steps` training steps in one `tf.function` call.

    Args:
      iterator: an iterator over a distributed dataset of (images, labels).
      num_steps: how many steps to run; a tensor argument, so changing it
        does not retrace.
      stop_requested: this worker was asked to stop (e.g. SIGTERM).
      save_requested: this worker wants a checkpoint now (chief's timer).
      host_seconds: this worker's host time to share with the others (the
        controller passes its previous loop's time outside this call).

    Returns:
      A `LoopOutput` with the per-step losses, the agreed requests and every
      worker's `host_seconds`.
    """
    if not 0 < num_steps <= self._steps_per_loop:
      raise ValueError(
        f"num_steps must be in [1, {self._steps_per_loop}], got {num_steps}."
      )
    if num_steps not in self._num_steps:
      self._num_steps[num_steps] = tf.constant(num_steps, tf.int32)
    args = (
      iterator,
      self._num_steps[num_steps],
      self._controls[bool(stop_requested), bool(save_requested)],
      tf.constant(float(host_seconds)),
    )  # float32; faster sans dtype.
    if iterator is not self._traced_for:
      # Called directly from now on, the trace skips tf.function's matching
      # of every argument against its traces (about 0.1 ms a call).
      self._traced = self._train.get_concrete_function(*args)
      self._traced_for = iterator
    totals = self._traced(*args).numpy()
    stop, save = totals[-2:]
    workers = totals[-2 - self._num_workers : -2]
    return LoopOutput(
      step_losses=totals[:num_steps],
      accuracy=(
        None
        if self._correct is None
        else float(totals[self._steps_per_loop])
        / (num_steps * self._global_batch_size)
      ),
      stop_requested=bool(stop > 0),
      save_requested=bool(save > 0),
      host_seconds=workers,
    )


def _host_slot(strategy: tf.distribute.Strategy) -> tuple[int, tf.Tensor]:
  """(workers, this worker's slot in the loop's all-reduce of host seconds).

  Each local replica adds its share of the slot, so the SUM over replicas
  is the worker's seconds.
  """
  local_replicas = worker_exchange.local_replicas(strategy)
  num_workers = worker_exchange.num_workers(strategy)
  index = worker_exchange.worker_index(strategy)
  slot = tf.one_hot(index, num_workers, dtype=tf.float32) / local_replicas
  return num_workers, slot


class EvalLoop:
  """The compiled evaluation loop: loss and accuracy over a finite dataset.

  It needs only the model (no optimizer, no global step), so the training
  controller and the side-car evaluator (ctl.train.evaluator) share it.
  """

  def __init__(
    self,
    *,
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    loss_fn: Callable | None = None,
  ):
    """Initializes the loop.

    Args:
      strategy: the distribution strategy the model's variables belong to.
      model: a Keras model mapping images to logits.
      loss_fn: `(labels, logits) -> per-example loss`.
    """
    self._strategy = strategy
    self._model = model
    self._loss_fn = loss_fn or sparse_softmax_cross_entropy
    with strategy.scope():
      self._eval_sums = _replica_accumulator([3])
    self._eval = tf.function(self._eval_loop)

  def _replica_eval(self, batch):
    images, labels = batch

    def sums():
      logits = self._model(images, training=False)
      per_example = self._loss_fn(labels, logits)
      return tf.reduce_sum(per_example), _count_correct(labels, logits)

    # A replica gets an empty batch when the last global batch is short.
    # The model is not run on it: oneDNN's CPU convolution returns a wrongly
    # shaped result for an empty batch (the input's channels), which breaks
    # the next layer.
    count = tf.shape(labels)[0]
    loss_sum, correct = tf.cond(
      count > 0, sums, lambda: (tf.constant(0.0), tf.constant(0.0))
    )
    self._eval_sums.assign_add(
      tf.stack([loss_sum, correct, tf.cast(count, tf.float32)])
    )

  def _eval_loop(self, dataset):
    strategy = self._strategy
    strategy.run(_zero, args=(self._eval_sums,))
    for batch in dataset:
      strategy.run(self._replica_eval, args=(batch,))
    return strategy.reduce(
      "SUM", strategy.run(self._eval_sums.read_value), axis=None
    )

  def evaluate(self, dataset) -> dict[str, float]:
    """Evaluates on a finite distributed dataset.

    Args:
      dataset: a distributed dataset of (images, labels) batches; partial
        and empty last batches are fine (sums, not means, are reduced).

    Returns:
      {"loss": mean per-example loss, "accuracy": ..., "examples": count};
      only {"examples": 0} when the dataset held no example: no evaluation,
      and no number that could pass for one.
    """
    loss_sum, correct, count = self._eval(dataset).numpy()
    if not count:
      return {"examples": 0}
    return {
      "loss": float(loss_sum / count),
      "accuracy": float(correct / count),
      "examples": int(count),
    }


def _replica_accumulator(shape) -> tf.Variable:
  """A float32 variable each replica adds to locally (sync on read, SUM)."""
  return tf.Variable(
    tf.zeros(shape),
    trainable=False,
    synchronization=tf.VariableSynchronization.ON_READ,
    aggregation=tf.VariableAggregation.SUM,
  )


def _zero(*variables) -> None:
  """Resets accumulators; runs in replica context (each local copy)."""
  for variable in variables:
    variable.assign(tf.zeros_like(variable))


def _count_correct(labels, logits):
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int64)
  return tf.reduce_sum(
    tf.cast(tf.equal(predictions, tf.cast(labels, tf.int64)), tf.float32)
  )
