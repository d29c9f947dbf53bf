"""A task's metrics by name, summed correctly over replicas and workers.

Each replica updates its own copy of every metric inside the compiled loop
(Keras metric variables sync on read and sum). The loop's one all-reduce
carries every metric's state (its sums and counts, never an average), so the
host holds the global state of a loop as numbers. Those states add up
across loops, which is how the metrics window covers many loops; a result
is made only when asked (a log line, a summary, an action), by a host-side
copy of the metric that is given the summed state.

A metric whose state is not a sum (a maximum, a last value) cannot be
reduced this way. What a variable declares (its aggregation) proves nothing,
so the metric's behaviour is proved instead, once, when the first loop that
updates the metrics is traced: on the host, its copy is given two made-up
batches of the shapes and dtypes the step gives it, from zero (as the loop
zeroes its copies) one at a time and then both, and its state after both
must be the sum of its states after each. No cost per step; the limit is
the made-up data's: a metric whose state is not a sum only on other data
passes.

A metric bound to one output (`OnOutput`) reads that output of `y_pred` and
the label (and sample weight) of the same name, as Keras's
`compile(metrics={"click": [...]})` does; its state is the metric's own, so
it is summed and restored as any other.
"""

from collections.abc import Callable, Mapping, Sequence
import dataclasses
import re
import threading

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from ctl.errors import UserError
from ctl.errors import error_sentence
from ctl.train import step as step_lib

# Names the run already uses for its own values in the same places.
_RESERVED = frozenset({"loss", "examples", "learning_rate"})
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
# The made-up batches' size, and that of every dimension the trace leaves
# unknown: a few examples cost microseconds, whatever the real batch.
_PROBE_SIZE = 2
# A state that is a sum matches to float32 rounding; one that is not (a
# maximum, a last value) is off by about a whole value.
_RTOL, _ATOL = 1e-3, 1e-5
# Errors of a metric that cannot take made-up inputs (then left unproved).
_PROBE_ERRORS = (TypeError, ValueError, NotImplementedError, tf.errors.OpError)


def sparse_accuracy() -> dict[str, keras.metrics.Metric]:
  """{"accuracy": ...}: the image classifier's metric (sparse labels)."""
  return {"accuracy": keras.metrics.SparseCategoricalAccuracy()}


@dataclasses.dataclass(frozen=True)
class OnOutput:
  """`metric` of the model's output `output` only (`ctl.OnOutput`).

  Attributes:
    output: a key of the step's dict of outputs (`y_pred`), or an index of
      its list; the labels (`y_true`) and sample weights, where they are a
      dict or a list too, are read at the same key.
    metric: the Keras metric that compares them.
  """

  output: str | int
  metric: keras.metrics.Metric


class MetricSet:
  """The task's named metrics: replica copies and host copies."""

  def __init__(
    self,
    build_metrics: Callable[[], Mapping[str, keras.metrics.Metric]] | None,
    *,
    strategy: tf.distribute.Strategy,
  ):
    """Builds the metrics.

    Args:
      build_metrics: returns {name: metric}; called once under the
        strategy's scope (the replicas' copies) and once outside it (the
        host's, which turn states into results and prove each state a
        sum). None: no metrics.
      strategy: the strategy of the compiled loops.

    Raises:
      UserError: a name or a metric that cannot be used.
    """
    build = build_metrics or dict
    with strategy.scope():
      self._replica, self._outputs = _checked(build())
    with tf.device("/cpu:0"):
      self._host, _ = _checked(build())
      for name, metric in self._host.items():
        _scalar(name, metric.result())  # Refused now, not after training.
    # In the loops: a metric of the task's own is its code (a Keras metric
    # is called as it is). The host's copies run eagerly.
    self._updates = {
      name: step_lib.task_code(metric.update_state)
      for name, metric in self._replica.items()
    }
    self._proving = threading.Lock()  # Replicas may trace in threads.
    self._proved = False
    self.names = tuple(self._replica)
    self._sizes = {
      name: [int(np.prod(v.shape)) for v in metric.variables]
      for name, metric in self._replica.items()
    }
    self.size = sum(sum(sizes) for sizes in self._sizes.values())

  def variables(self) -> list:
    """Every replica-side state variable (to zero them in replica context)."""
    return [v.value for m in self._replica.values() for v in m.variables]

  def update_states(self, output: step_lib.StepOutput) -> None:
    """Updates every metric from one replica's step output (replica
    context): a metric named in `output.values` averages that value, the
    others compare `y_true` with `y_pred`. The first trace also proves
    each metric's state a sum (`_prove_sums`).

    Raises:
      UserError: a metric bound to an output the step lacks, or whose
        state is not a sum.
    """
    inputs = {name: self._inputs(name, output) for name in self._replica}
    self._prove_sums(inputs, output.per_example_loss.shape[0])
    for name, update_state in self._updates.items():
      _update(update_state, inputs[name])

  def _inputs(self, name: str, output: step_lib.StepOutput) -> tuple:
    """What metric `name` is given: `(value, sample_weight)` for a name in
    `output.values`, else `(y_true, y_pred, sample_weight)`, read at the
    output it is bound to (`OnOutput`)."""
    weight = output.sample_weight
    if name in (output.values or {}):
      return output.values[name], weight
    y_true, y_pred = output.y_true, output.y_pred
    key = self._outputs.get(name)
    if key is not None:
      y_pred = _at(y_pred, key, name, "y_pred", required=True)
      y_true = _at(y_true, key, name, "y_true")
      weight = _at(weight, key, name, "sample_weight")
    return y_true, y_pred, weight

  def _prove_sums(self, inputs: dict[str, tuple], batch_size) -> None:
    """Refuses, once, a metric whose state is not a sum, before any step.

    ctl sums each metric's state over replicas and loops, which is right
    only when the state after two batches is the sum of the states after
    each. That is tried, not read from a declaration, on the host's copy
    (outside the trace: `init_scope`), with made-up batches of the shapes
    and dtypes of `inputs`, the tensors the trace gives each metric, where
    `batch_size` (None when unknown) is their first dimension.
    """
    with self._proving:
      if self._proved:
        return
      with tf.init_scope(), tf.device("/cpu:0"):
        for name, metric in self._host.items():
          _prove_sum(name, metric, inputs[name], batch_size)
      self._proved = True

  def state(self) -> list[tf.Tensor]:
    """This replica's state, flat float32 pieces in a fixed order."""
    return [
      tf.reshape(tf.cast(v.value, tf.float32), [-1])
      for metric in self._replica.values()
      for v in metric.variables
    ]

  def results(self, state: np.ndarray) -> dict[str, float]:
    """{name: result} of a summed state (as `state` lays it out)."""
    results, offset = {}, 0
    for name, metric in self._host.items():
      for variable, size in zip(metric.variables, self._sizes[name]):
        piece = state[offset : offset + size].reshape(variable.shape)
        variable.assign(piece.astype(variable.dtype))
        offset += size
      results[name] = _scalar(name, metric.result())
    return results


def _at(structure, key, name: str, what: str, *, required: bool = False):
  """`structure[key]` for metric `name` bound to output `key`; a structure
  that is not a dict or a list (one label for every output, no weights) is
  itself, unless `required`.

  Raises:
    UserError: the step's `what` has no output `key` (found when the loop
      is traced, before the first step).
  """
  keyed = isinstance(structure, Mapping) or (
    isinstance(structure, Sequence) and not isinstance(structure, str)
  )
  if not keyed and not required:
    return structure
  try:
    return structure[key]
  except (KeyError, IndexError, TypeError):
    keys = list(structure) if isinstance(structure, Mapping) else None
    has = (
      f"the keys {sorted(map(str, keys))}"
      if keys is not None
      else f"{len(structure)} items"
      if keyed
      else "one tensor"
    )
    raise UserError(
      f"Metric {name!r} reads output {key!r}, but the step's {what} has "
      f"{has}; give ctl.OnOutput one of them."
    ) from None


def _checked(
  metrics,
) -> tuple[dict[str, keras.metrics.Metric], dict[str, str | int]]:
  """`metrics` as {name: metric} and {name: output} (for those bound to one
  output), or UserError naming what cannot be used."""
  if not isinstance(metrics, Mapping):
    raise UserError(
      "Task.build_metrics must return a dict of {name: keras metric}, got "
      f"{type(metrics).__name__}."
    )
  outputs = {
    name: metric.output
    for name, metric in metrics.items()
    if isinstance(metric, OnOutput)
  }
  metrics = {
    name: metric.metric if isinstance(metric, OnOutput) else metric
    for name, metric in metrics.items()
  }
  for name, metric in metrics.items():
    if (
      not isinstance(name, str) or not _NAME.match(name) or (name in _RESERVED)
    ):
      raise UserError(
        f"Metric name {name!r} cannot be used: a name is letters, digits "
        f"and _ (a letter first), and not one of {sorted(_RESERVED)}."
      )
    if not isinstance(metric, keras.metrics.Metric):
      raise UserError(
        f"Metric {name!r} must be a keras.metrics.Metric (or ctl.OnOutput of "
        "one), got "
        f"{type(metric).__name__}."
      )
  return metrics, outputs


def _update(update_state: Callable, inputs: tuple) -> None:
  """A metric's `update_state` of its inputs (`MetricSet._inputs`)."""
  *arguments, weight = inputs
  update_state(*arguments, sample_weight=weight)


def _prove_sum(name: str, metric, inputs: tuple, batch_size) -> None:
  """Refuses metric `name` unless its state after two made-up batches like
  `inputs` is the sum of its states after each; a metric that cannot take
  made-up inputs is left unproved, with a warning.

  Raises:
    UserError: its state is not a sum.
  """
  try:
    rng = np.random.default_rng(0)  # The same batches on every worker.
    first, second = (_made_up(inputs, batch_size, rng) for _ in range(2))
    states = [
      _state_after(metric, batches)
      for batches in ([first, second], [first], [second])
    ]
  except _PROBE_ERRORS as e:
    logging.warning(
      "Metric %r could not be probed with made-up inputs (%s); its state is "
      "taken to be a sum, which ctl adds up over replicas and loops.",
      name,
      error_sentence(e),
    )
    return
  for variable, *values in zip(metric.variables, *states):
    _refuse_unless_summed(name, variable.name, *values)


def _state_after(metric, batches) -> list[np.ndarray]:
  """`metric`'s state, each variable flat, after it is zeroed (as the loop
  zeroes its copies) and given `batches`."""
  for variable in metric.variables:
    variable.assign(np.zeros(variable.shape, variable.dtype))
  for batch in batches:
    _update(metric.update_state, batch)
  return [np.asarray(v.numpy(), np.float64).ravel() for v in metric.variables]


def _made_up(inputs: tuple, batch_size, rng: np.random.Generator) -> tuple:
  """`inputs` (the trace's tensors) made up as eager tensors of their
  dtypes and shapes, but `_PROBE_SIZE` for the batch (a first dimension of
  `batch_size`) and any unknown dimension: floats uniform in [0, 1)
  (labels, probabilities, logits and weights alike), other dtypes zeros
  (class 0, a negative label: valid for any metric)."""

  def made_up(tensor):
    if not tf.is_tensor(tensor):
      return tensor
    shape = [
      _PROBE_SIZE if size is None or (i == 0 and size == batch_size) else size
      for i, size in enumerate(tensor.shape.as_list())
    ]
    if tensor.dtype.is_floating:
      return tf.cast(rng.random(shape, dtype=np.float32), tensor.dtype)
    return tf.zeros(shape, tensor.dtype)

  return tf.nest.map_structure(made_up, inputs)


def _refuse_unless_summed(name: str, variable: str, both, one, other):
  """UserError unless the values of metric `name`'s state `variable` after
  two batches (`both`) are the sum of its values after one each."""
  wrong = np.flatnonzero(~np.isclose(one + other, both, _RTOL, _ATOL))
  if wrong.size:
    at = wrong[0]
    where = "" if both.size == 1 else f"[{at}]"
    raise UserError(
      f"Metric {name!r} cannot be summed across replicas and loops: its "
      f"state {variable}{where} was {both[at]:.4g} after two batches but "
      f"{one[at]:.4g} + {other[at]:.4g} after one each, so it is not a sum "
      "of per-example parts (a maximum, a last value…)."
    )


def _scalar(name: str, result) -> float:
  value = np.asarray(result)
  if value.size != 1:
    raise UserError(
      f"Metric {name!r} must have a scalar result, got shape {value.shape}."
    )
  return float(value.reshape(()))
