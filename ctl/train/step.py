"""The user's step: how a batch becomes per-example losses and metric inputs.

A `Task` says it in plain callables, run in replica context inside the
compiled loop (the user never writes `strategy.run`, `tf.function` or the
loop):

- `compute_loss(model, batch, training) -> StepOutput`: the forward pass.
  ctl averages `per_example_loss` over the *global* batch (sample weights
  applied), adds the model's regularization losses scaled by 1/replicas,
  takes the gradients and applies them. The default (`keras_compute_loss`)
  unpacks `(x, y)` or `(x, y, sample_weight)` as `model.fit` does, so `x`
  and `y` may be any nested structure (dicts of token ids and features).
- `replica_step(context, batch) -> StepOutput`: the whole update, for what
  the default cannot say (an auxiliary loss on an intermediate layer,
  clipping, several losses). `context.average_loss` gives the replica's
  share of a loss exactly as the default step computes it.

Either way the step returns a `StepOutput`, from which ctl reports the loss
(the same formula in both cases) and updates the task's metrics.
"""

from collections.abc import Callable, Mapping, Sequence
import dataclasses
from typing import Any, NamedTuple

import keras
import tensorflow as tf

from ctl.errors import UserError


class StepOutput(NamedTuple):
  """What one step (or one evaluation batch) produced, per replica.

  Attributes:
    per_example_loss: the loss of each example, shape `[batch]`.
    y_true: the targets the metrics compare with (any nested structure).
    y_pred: the model's predictions for the metrics.
    sample_weight: one weight per example, or None; it weighs the loss and
      every metric.
    values: {metric name: per-example tensor} for metrics that average a
      value of their own (a `keras.metrics.Mean` of that name), e.g. an
      auxiliary loss; such a metric gets `update_state(value, weight)`.
  """

  per_example_loss: tf.Tensor
  y_true: Any = None
  y_pred: Any = None
  sample_weight: tf.Tensor | None = None
  values: Mapping[str, tf.Tensor] | None = None


def sparse_softmax_cross_entropy(labels, logits):
  """Per-example cross entropy from float32 logits (mixed precision safe)."""
  return keras.losses.sparse_categorical_crossentropy(
    labels, tf.cast(logits, tf.float32), from_logits=True
  )


def task_code(fn: Callable) -> Callable:
  """`fn`, the task's own code, as `tf.function` would convert it with
  AutoGraph (a Python `if` on a tensor becomes graph control flow), where
  ctl's loops call it.

  The loops themselves are traced without AutoGraph (`autograph=False`):
  converting a function costs every start of a worker CPU time (about 1.2 s
  for ctl's loops and helpers, on 2 cores), and ctl's code branches on
  Python values only. Code of TensorFlow's and Keras's is called as it is,
  as `tf.function` does (AutoGraph's own rules, through the converter
  tf.data and Keras use for the functions they are given). Call it when the
  run is built, outside any trace: inside a trace made without AutoGraph
  it converts nothing. A run built where the caller switched AutoGraph off
  (`tf.autograph.experimental.do_not_convert`) converts nothing either.
  """
  context = tf.__internal__.autograph.control_status_ctx()
  if context.status.name == "UNSPECIFIED":
    # Enabled, as `tf.function` runs converted code: TensorFlow's calls that
    # convert a function of their own (`merge_call`, `strategy.run`) then do.
    context = type(context)(status=type(context.status).ENABLED)
  return tf.__internal__.autograph.tf_convert(fn, context)


def keras_compute_loss(loss_fn: Callable | None) -> Callable[..., StepOutput]:
  """The default forward pass: `model.fit`'s unpacking and `loss_fn`.

  Args:
    loss_fn: the task's `(y_true, y_pred) -> per-example loss`; None:
      sparse softmax cross-entropy.

  Returns:
    `compute_loss(model, batch, training) -> StepOutput` for a batch of
    `(x, y)` or `(x, y, sample_weight)`.
  """
  loss_fn = task_code(loss_fn) if loss_fn else sparse_softmax_cross_entropy

  def compute_loss(model, batch, training):
    check_fit_batch(batch)
    x, y, weight = keras.utils.unpack_x_y_sample_weight(batch)
    y_pred = model(x, training=training)
    return StepOutput(
      per_example_loss=loss_fn(y, y_pred),
      y_true=y,
      y_pred=y_pred,
      sample_weight=weight,
    )

  return compute_loss


def check_fit_batch(batch) -> None:
  """Refuses a batch, or a dataset's element spec, that the default step
  cannot unpack: it takes `(x, y)` or `(x, y, sample_weight)`, as
  `model.fit` does."""
  if not isinstance(batch, tuple) or not 2 <= len(batch) <= 3:
    raise UserError(
      "Each batch must be (inputs, targets) or (inputs, targets, "
      f"sample_weight) for Task.loss_fn, got {_describe(batch)}; give "
      "Task.compute_loss to take another structure."
    )


def check_default_batches(task, batch_spec, *, evaluation: bool) -> None:
  """Refuses, when the run is built, batches (element spec `batch_spec`)
  that the default step would be given but cannot unpack: every batch of a
  task without `compute_loss`, but the training ones of a task with its own
  `replica_step`. The training batches are checked before the evaluation
  batches are compared with them (ctl.train.state.check_eval_batches)."""
  if task.compute_loss is None and (evaluation or task.replica_step is None):
    check_fit_batch(batch_spec)


def compute_loss_of(
  task, *, metric_names: Sequence[str]
) -> Callable[..., StepOutput]:
  """A task's forward pass: its own `compute_loss`, or the default one with
  its `loss_fn` (sparse softmax cross-entropy when it has none).

  Checked while the loop is traced: each of its `values` must be read by
  one of `metric_names` (the task's metrics).
  """
  forward, where = task.compute_loss, "Task.compute_loss"
  if forward is None:
    forward, where = keras_compute_loss(task.loss_fn), "Task.loss_fn"
  else:
    forward = task_code(forward)

  def compute_loss(model, batch, training):
    output = forward(model, batch, training)
    if isinstance(output, StepOutput):  # `checked` refuses anything else.
      _check_values(output, metric_names, where=where)
    return output

  return compute_loss


def replica_step_of(
  task, *, metric_names: Sequence[str]
) -> Callable[..., StepOutput] | None:
  """A task's `replica_step` (None when it has none), checked while the
  loop is traced: each of its `values` must be read by one of
  `metric_names` (the task's metrics)."""
  if task.replica_step is None:
    return None
  step = task_code(task.replica_step)

  def replica_step(context, batch):
    output = step(context, batch)
    if isinstance(output, StepOutput):  # `checked` refuses anything else.
      _check_values(output, metric_names, where="Task.replica_step")
    return output

  return replica_step


def _check_values(
  output: StepOutput, metric_names: Sequence[str], *, where: str
) -> None:
  """Refuses `values` that no metric reads: each would be computed at every
  step for nothing, a metric's name misspelt or its metric left out."""
  unread = sorted(set(output.values or ()) - set(metric_names))
  if unread:
    raise UserError(
      f"{where} returned values {unread} that no metric reads (the task's "
      f"metrics are {sorted(metric_names)}); name a keras.metrics.Mean of "
      "each in Task.build_metrics, or leave them out."
    )


def classifier_compute_loss() -> Callable[..., StepOutput]:
  """The forward pass of `(images, labels)` batches with sparse softmax
  cross-entropy (the loops' default)."""
  return keras_compute_loss(None)


@dataclasses.dataclass(frozen=True)
class StepContext:
  """What a user's `replica_step` works with.

  Attributes:
    model: the model (its variables are the strategy's).
    optimizer: the built optimizer (`scale_loss` before taking gradients
      keeps mixed-float16 loss scaling right; `apply_gradients` sums the
      replicas' gradients).
    global_batch_size: examples per step over all replicas.
  """

  model: keras.Model
  optimizer: keras.optimizers.Optimizer
  global_batch_size: int

  # Called from the task's converted code: ctl's own is not converted.
  @tf.autograph.experimental.do_not_convert
  def average_loss(self, per_example_loss, sample_weight=None) -> tf.Tensor:
    """This replica's share of the step's loss (docs/design.md, Loss)."""
    return average_loss(
      self.model,
      per_example_loss,
      sample_weight=sample_weight,
      global_batch_size=self.global_batch_size,
    )


def average_loss(
  model, per_example_loss, *, sample_weight, global_batch_size: int
) -> tf.Tensor:
  """The replica's share of the loss: the per-example loss averaged over
  the global batch (weighted), plus the regularization losses scaled by
  1/replicas, so that summing over replicas gives the step's loss."""
  per_example_loss = tf.cast(per_example_loss, tf.float32)
  if sample_weight is not None:
    sample_weight = tf.cast(sample_weight, tf.float32)
  loss = tf.nn.compute_average_loss(
    per_example_loss,
    sample_weight=sample_weight,
    global_batch_size=global_batch_size,
  )
  if model.losses:
    loss += tf.nn.scale_regularization_loss(
      tf.add_n([tf.cast(x, tf.float32) for x in model.losses])
    )
  return loss


def checked(output: Any, batch: Any, *, where: str) -> StepOutput:
  """`output` when it is a usable StepOutput for `batch`; else UserError.

  Checked while the loop is traced (before its first step), from static
  shapes: a per-example loss reduced to one value (`keepdims=True` gives
  shape `[1]`) would silently divide the loss and the gradients by the
  global batch.
  """
  if not isinstance(output, StepOutput):
    raise UserError(
      f"{where} must return a ctl.StepOutput, got {type(output).__name__}."
    )
  loss = tf.convert_to_tensor(output.per_example_loss)
  batch_size = _batch_size(batch)
  if loss.shape.rank != 1 or (
    batch_size is not None
    and loss.shape[0] is not None
    and loss.shape[0] != batch_size
  ):
    raise UserError(
      f"{where}: the per-example loss must have shape [batch] "
      f"([{batch_size}] here), one value per example, got "
      f"{loss.shape.as_list() if loss.shape.rank is not None else '?'}; "
      "do not reduce it (ctl averages it over the global batch)."
    )
  return output


def batch_size_of(batch) -> tf.Tensor:
  """The number of examples in `batch` (its first tensor's first dimension),
  as a tensor."""
  return tf.shape(tf.nest.flatten(batch)[0])[0]


def _batch_size(batch) -> int | None:
  """The static leading dimension of the batch's first tensor, or None."""
  for leaf in tf.nest.flatten(batch):
    shape = getattr(leaf, "shape", None)
    if shape is not None and shape.rank:
      return shape[0]
  return None


def _describe(batch) -> str:
  """A batch's structure in a few words, for an error message."""
  if isinstance(batch, tuple):
    return f"a tuple of {len(batch)}"
  return type(batch).__name__


def update_check(optimizer) -> Callable[[int], None]:
  """Reads `optimizer`'s count of its updates now (before a loop of a
  user's `Task.replica_step`) and returns `check(num_steps)`, to call once
  that loop ran `num_steps` steps: a step that applied no update (no
  `apply_gradients`, or another optimizer's) is refused there, not after a
  run that trained nothing. Two reads in all, no cost per step.

  Refused only when nothing else explains it: a LossScaleOptimizer does not
  count a step it skipped (non-finite gradients; its scale then fell), and
  with gradient accumulation Keras counts one update per
  `gradient_accumulation_steps` steps. More updates than steps (an update
  per group of variables) are the step's choice.
  """
  before = _updates_counted(optimizer)
  # A LossScaleOptimizer's inner optimizer counts the updates.
  counting = getattr(optimizer, "inner_optimizer", optimizer)
  per_update = counting.gradient_accumulation_steps or 1

  def check(num_steps: int) -> None:
    if num_steps >= per_update and _updates_counted(optimizer) == before:
      raise UserError(
        "Task.replica_step applied no update: optimizer.iterations "
        f"advanced 0 over {num_steps} steps; apply its gradients with "
        "context.optimizer.apply_gradients."
      )

  return check


def _updates_counted(optimizer) -> tuple[int, float | None]:
  """(the optimizer's `iterations`, its loss scale or None), read now: the
  scale changes at a step a LossScaleOptimizer skipped uncounted."""
  scale = getattr(optimizer, "dynamic_scale", None)
  return (
    int(optimizer.iterations.numpy()),
    None if scale is None else float(scale.numpy()),
  )
