"""The compiled loops that run the task's step.

This is the part a newcomer should find in under a minute: `_replica_step`
is the per-replica GradientTape step (the task's `compute_loss`, or its own
`replica_step`; ctl.train.step), `_train_loop` runs `steps_per_loop` of them
inside one `tf.function` (a `tf.while_loop`, so the host is touched once per
loop) of `TrainLoop`, and `EvalLoop` runs over a finite validation set (it
needs no optimizer).

Loss contract (docs/design.md, "Contracts"): the per-example loss is averaged
over the *global* batch with `tf.nn.compute_average_loss`, regularization
losses are scaled by 1/replicas, gradients are summed across replicas by the
optimizer, and the reported loss is `strategy.reduce(SUM, ...)` of the
per-replica averages. That reduce happens once per loop, not per step: each
replica accumulates its per-step losses and its metrics' sums and counts
locally (sync-on-read variables; a loop of one step passes its loss straight
to the reduce), so the only per-step communication is the gradient
all-reduce.

Host cost per call is kept small (it is what `steps_per_loop=1` pays every
step): the constant arguments of a call are made once (only the worker's
host seconds, one float, are new each call), the trace holds its iterator
(binding a distributed iterator as an argument cost more host time than a
small step), the traced function is called directly (no per-call matching
of arguments to traces), one call returns one tensor (one device-to-host
copy), and a loop of one step is not a `tf.while_loop` (a while op costs
host time per call) and has no loss buffer. Updating the metrics
at every step can be switched off (`train_metrics=False`).
"""

from collections.abc import Callable
import contextlib
import dataclasses
import functools
import itertools
import warnings

import keras
import numpy as np
import tensorflow as tf

from ctl.distributed import worker_exchange
from ctl.errors import UserError
from ctl.errors import error_sentence
from ctl.train import metric_set as metric_set_lib
from ctl.train import step as step_lib

# What `tf.data.Dataset.options()` warns when it is called in a graph.
_GRAPH_OPTIONS_WARNING = "To make it possible to preserve tf.data options"


@contextlib.contextmanager
def _no_graph_options_warning():
  """Within it, that one warning of TensorFlow's is not printed.

  Tracing a loop over a distributed dataset makes TensorFlow's own iterator
  code (tf.data's `iterator_ops`) ask the dataset for its options in graph
  mode, where `Dataset.options()` warns that the value "might not reflect the
  actual value of the options". Neither ctl nor the task made that call, and
  the options it reads are the ones set in Python, so the warning, printed at
  every run's first evaluation, tells a user nothing. Only this message is
  hidden, and only while the block runs.
  """
  with warnings.catch_warnings():
    warnings.filterwarnings(
      "ignore", message=_GRAPH_OPTIONS_WARNING, category=UserWarning
    )
    yield


@dataclasses.dataclass(frozen=True)
class LoopOutput:
  """What one call of the train loop reports back to the host.

  Attributes:
    step_losses: the reduced (global-batch) loss of every step that ran.
    metric_state: the task's metrics' state summed over the call's steps,
      replicas and workers (`MetricSet.results` turns it into values); None
      when the loop does not update them (`train_metrics=False`).
    stop_requested: some worker asked to stop (preemption) at this step.
    save_requested: the chief asked for a time-based checkpoint at this step.
    host_seconds: every worker's `host_seconds` of this call, by index in the
      cluster (the chief first); see `TrainLoop.train`.
  """

  step_losses: np.ndarray
  metric_state: np.ndarray | None
  stop_requested: bool
  save_requested: bool
  host_seconds: np.ndarray


class TrainLoop:
  """The compiled train loop for one model under one strategy.

  Everything stateful (model, optimizer, global step, metrics) must have been
  created under `strategy.scope()`; the optimizer must be built
  (`optimizer.build`) so that no variable is created inside a `tf.function`.
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
    compute_loss: Callable | None = None,
    replica_step: Callable | None = None,
    metrics: metric_set_lib.MetricSet | None = None,
    jit_compile: bool = False,
    train_metrics: bool = True,
    loss_hook: Callable | None = None,
  ):
    """Initializes the loop.

    Args:
      strategy: the distribution strategy the variables belong to.
      model: the Keras model.
      optimizer: a built Keras optimizer (a LossScaleOptimizer for fp16).
      global_step: int64 variable incremented once per step.
      global_batch_size: examples per step summed over all replicas.
      steps_per_loop: the most steps one `train` call runs.
      compute_loss: `(model, batch, training) -> StepOutput` (ctl.train.step);
        None: `(images, labels)` batches and sparse softmax cross-entropy.
      replica_step: `(StepContext, batch) -> StepOutput`, the whole update
        instead of the default one (`compute_loss` is then unused).
      metrics: the task's metrics (ctl.train.metric_set); None: none.
      jit_compile: compile the forward and backward pass with XLA (the
        update, which holds the all-reduce, stays outside the cluster).
      train_metrics: update the metrics at every step, for
        `LoopOutput.metric_state`; False saves those ops per step.
      loss_hook: test hook, `(loss, global_step) -> loss`
        (ctl.resilience.faults); None keeps it out of the compiled step.
    """
    self._strategy = strategy
    self._model = model
    self._optimizer = optimizer
    self._global_step = global_step
    self._global_batch_size = global_batch_size
    self._steps_per_loop = steps_per_loop
    self._compute_loss = compute_loss or step_lib.classifier_compute_loss()
    self._user_step = replica_step
    self._loss_hook = loss_hook
    self.metrics = metrics if train_metrics and metrics else None
    self._step_losses = None  # A loop of one step needs no loss buffer.
    if steps_per_loop > 1:
      with strategy.scope():
        self._step_losses = _replica_accumulator([steps_per_loop])
    self._gradients = (
      tf.function(self._loss_and_gradients, jit_compile=True, autograph=False)
      if jit_compile
      else (self._loss_and_gradients)
    )
    self._traced = self._traced_for = None  # The trace; the iterator it read.
    self._num_steps = {}  # Made once: a new tensor per call costs host time.
    self._controls = _controls()
    self._num_workers, self._host_slot = _host_slot(strategy)

  def _average(self, output) -> tf.Tensor:
    loss = step_lib.average_loss(
      self._model,
      output.per_example_loss,
      sample_weight=output.sample_weight,
      global_batch_size=self._global_batch_size,
    )
    if self._loss_hook:
      loss = self._loss_hook(loss, self._global_step)
    return loss

  def _loss_and_gradients(self, batch):
    with tf.GradientTape() as tape:
      output = step_lib.checked(
        self._compute_loss(self._model, batch, True),
        batch,
        where="Task.compute_loss",
      )
      loss = self._average(output)
      scaled_loss = self._optimizer.scale_loss(loss)
    gradients = tape.gradient(scaled_loss, self._model.trainable_variables)
    if all(gradient is None for gradient in gradients):  # Known at trace.
      raise UserError(
        "The task's per-example loss (of Task.loss_fn, or Task.compute_loss's "
        "per_example_loss) reaches no trainable variable of the model, so no "
        "gradient could train it; compute it from the model's predictions."
      )
    return loss, output, gradients

  def _replica_step(self, batch) -> tf.Tensor:
    """One step's update on this replica; returns its global-batch loss."""
    if self._user_step is None:
      loss, output, gradients = self._gradients(batch)
      self._optimizer.apply_gradients(
        zip(gradients, self._model.trainable_variables)
      )
    else:
      context = step_lib.StepContext(
        model=self._model,
        optimizer=self._optimizer,
        global_batch_size=self._global_batch_size,
      )
      output = step_lib.checked(
        self._user_step(context, batch), batch, where="Task.replica_step"
      )
      loss = self._average(output)
    # Local bookkeeping only: no communication per step beyond the gradients.
    if self.metrics is not None:
      self.metrics.update_states(output)
    return loss

  def _buffered_step(self, batch, index) -> None:
    """A step of a longer loop: its loss goes into the loop's buffer."""
    self._step_losses.assign_add(
      tf.scatter_nd(  # Not one_hot * loss: NaN * 0.
        [[index]], [self._replica_step(batch)], [self._steps_per_loop]
      )
    )

  def _train_loop(self, iterator, num_steps, control, host_seconds):
    strategy = self._strategy
    strategy.run(_zero, args=self._accumulators())
    if self._step_losses is None:
      # One step needs no while loop (a while op costs host time on every
      # call) and no loss buffer: its loss goes straight into the reduce
      # (the buffer's ops cost about 0.1 ms a call on a 2-core CPU).
      losses = strategy.run(self._replica_step, args=(next(iterator),))
      self._global_step.assign_add(1)
    else:
      losses = None  # Read from the buffer.

      def step(i):
        strategy.run(self._buffered_step, args=(next(iterator), i))
        self._global_step.assign_add(1)
        return (i + 1,)

      tf.while_loop(
        lambda i: i < num_steps, step, (0,), maximum_iterations=num_steps
      )
    # The loop's one extra all-reduce: [step losses..., metric states...,
    # host seconds per worker..., requests]. Summing the requests tells every
    # worker whether any worker was asked to stop, or the chief wants a
    # time-based save, so all of them take the same decision at the same
    # step; each worker's host seconds fill its own slot, so the sum holds
    # everyone's; metric states are sums and counts, so their sum is exact.
    return strategy.reduce(
      "SUM",
      strategy.run(
        lambda losses: tf.concat(
          [
            self._step_losses.read_value() if losses is None else [losses],
            *(self.metrics.state() if self.metrics else []),
            self._host_slot * host_seconds,
            control,
          ],
          0,
        ),
        args=(losses,),
      ),
      axis=None,
    )

  def _accumulators(self) -> tuple[tf.Variable, ...]:
    """The variables a call starts from zero: the loss buffer, metrics."""
    buffer = () if self._step_losses is None else (self._step_losses,)
    return buffer + tuple(self.metrics.variables() if self.metrics else ())

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
      iterator: an iterator over a distributed dataset of the task's batches.
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
    requests = (stop_requested, save_requested)
    args = self._arguments(num_steps, *requests)
    args += (tf.constant(float(host_seconds)),)  # float32; faster sans dtype.
    self.trace(iterator)
    try:
      totals = self._traced(*args).numpy()
    except tf.errors.OutOfRangeError as e:
      raise UserError(
        f"The training data ran out after fewer than {num_steps} more steps "
        "(an OutOfRangeError): Task.train_dataset_fn must return an endless "
        "dataset (`.repeat()`); the run stops at a step target instead."
      ) from e
    stop, save = totals[-2:]
    workers = totals[-2 - self._num_workers : -2]
    metrics_end = self._steps_per_loop + (
      self.metrics.size if self.metrics else 0
    )
    return LoopOutput(
      step_losses=totals[:num_steps],
      metric_state=(
        totals[self._steps_per_loop : metrics_end] if self.metrics else None
      ),
      stop_requested=bool(stop > 0),
      save_requested=bool(save > 0),
      host_seconds=workers,
    )

  def trace(self, iterator) -> None:
    """Traces the loop for `iterator`'s data (nothing runs), once per
    iterator: the first call of `train` does it too, but a run traces
    before its first save, so a step that cannot work (a bad batch, a loss
    of the wrong shape) is refused before anything is written."""
    if iterator is self._traced_for:
      return
    # The trace holds the iterator (not an argument: binding a distributed
    # iterator's structure to a call took about 0.8 ms of host time a call
    # on a 2-core CPU) and is called directly from now on (no matching of
    # the arguments against tf.function's traces, about 0.1 ms a call).
    loop = tf.function(
      functools.partial(self._train_loop, iterator), autograph=False
    )
    try:
      self._traced = loop.get_concrete_function(
        *self._arguments(1, False, False), tf.constant(0.0)
      )
    except UserError as e:  # From the task's converted code: AutoGraph's
      # trace may stand in front of it.
      raise UserError(error_sentence(e)) from None
    except (TypeError, ValueError, NotImplementedError, tf.errors.OpError) as e:
      raise UserError(
        "The task's step cannot run on its training batches "
        f"{_spec_of(iterator)}: {error_sentence(e)}"
      ) from e
    self._traced_for = iterator

  def update_check(self) -> Callable[[int], None]:
    """The check of the next loop's updates (`step.update_check`), read
    now; none for ctl's own step, which always applies its gradients."""
    if self._user_step is None:
      return lambda num_steps: None
    return step_lib.update_check(self._optimizer)

  def _arguments(self, num_steps, *requests: bool) -> tuple:
    """The arguments of a call but the host seconds, made once each."""
    if num_steps not in self._num_steps:
      self._num_steps[num_steps] = tf.constant(num_steps, tf.int32)
    return (
      self._num_steps[num_steps],
      self._controls[tuple(bool(r) for r in requests)],
    )


def _spec_of(iterator) -> str:
  """The structure of an iterator's batches, for an error message."""
  return str(
    tf.nest.map_structure(
      lambda spec: f"{spec.dtype.name}{spec.shape.as_list()}",
      iterator.element_spec,
    )
  )


def _controls() -> dict[tuple[bool, ...], tf.Tensor]:
  """The loop's request argument for each (stop, save), made once."""
  return {
    requests: tf.constant([float(r) for r in requests])
    for requests in itertools.product((False, True), repeat=2)
  }


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
  """The compiled evaluation loop: the loss and the task's metrics over a
  finite dataset.

  It needs only the model (no optimizer, no global step), so the training
  controller and the side-car evaluator (ctl.train.evaluator) share it.
  """

  def __init__(
    self,
    *,
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    compute_loss: Callable | None = None,
    metrics: metric_set_lib.MetricSet | None = None,
  ):
    """Initializes the loop.

    Args:
      strategy: the distribution strategy the model's variables belong to.
      model: the Keras model.
      compute_loss: `(model, batch, training) -> StepOutput`; None:
        `(images, labels)` batches and sparse softmax cross-entropy.
      metrics: the task's metrics; None: the loss alone.
    """
    self._strategy = strategy
    self._model = model
    self._compute_loss = compute_loss or step_lib.classifier_compute_loss()
    self._metrics = metrics
    with strategy.scope():
      self._eval_sums = _replica_accumulator([2])  # Loss sum, examples.
    self._eval = tf.function(self._eval_loop, autograph=False)

  def _replica_eval(self, batch):
    def summed_loss():
      output = step_lib.checked(
        self._compute_loss(self._model, batch, False),
        batch,
        where="Task.compute_loss",
      )
      per_example = tf.cast(output.per_example_loss, tf.float32)
      if output.sample_weight is not None:
        per_example *= tf.cast(output.sample_weight, tf.float32)
      if self._metrics is not None:
        self._metrics.update_states(output)
      return tf.reduce_sum(per_example)

    # A replica gets an empty batch when the last global batch is short.
    # The model is not run on it: oneDNN's CPU convolution returns a wrongly
    # shaped result for an empty batch (the input's channels), which breaks
    # the next layer.
    count = step_lib.batch_size_of(batch)
    loss_sum = tf.cond(count > 0, summed_loss, lambda: tf.constant(0.0))
    self._eval_sums.assign_add(tf.stack([loss_sum, tf.cast(count, tf.float32)]))

  def _eval_loop(self, dataset):
    strategy = self._strategy
    metric_variables = self._metrics.variables() if self._metrics else []
    strategy.run(_zero, args=(self._eval_sums, *metric_variables))
    iterator = iter(dataset)

    def step(batch):
      strategy.run(self._replica_eval, args=(batch.get_value(),))
      return (iterator.get_next_as_optional(),)

    # Until the dataset ends on every worker (the optional agrees on it).
    tf.while_loop(
      lambda batch: batch.has_value(),
      step,
      (iterator.get_next_as_optional(),),
      parallel_iterations=1,
    )
    return strategy.reduce(
      "SUM",
      strategy.run(
        lambda: tf.concat(
          [
            self._eval_sums.read_value(),
            *(self._metrics.state() if self._metrics else []),
          ],
          0,
        )
      ),
      axis=None,
    )

  def evaluate(self, dataset) -> dict[str, float]:
    """Evaluates on a finite distributed dataset.

    Args:
      dataset: a distributed dataset of the task's batches; partial and
        empty last batches are fine (sums, not means, are reduced).

    Returns:
      {"loss": mean per-example loss, "examples": count, and each metric's
      result by name}; only {"examples": 0} when the dataset held no
      example: no evaluation, and no number that could pass for one.
    """
    try:
      with _no_graph_options_warning():
        totals = self._eval(dataset).numpy()
    except UserError as e:  # Raised while tracing: AutoGraph's text, if
      # the task's converted code raised it, off.
      raise UserError(error_sentence(e)) from None
    loss_sum, count = totals[:2]
    if not count:
      return {"examples": 0}
    metrics = self._metrics.results(totals[2:]) if self._metrics else {}
    return {"loss": float(loss_sum / count), **metrics, "examples": int(count)}


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
