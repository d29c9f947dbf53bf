"""A task's metrics by name, summed correctly over replicas and workers.

Each replica updates its own copy of every metric inside the compiled loop
(Keras metric variables sync on read and sum). The loop's one all-reduce
carries every metric's state (its sums and counts, never an average), so the
host holds the global state of a loop as numbers. Those states add up
across loops, which is how the metrics window covers many loops; a result
is made only when asked (a log line, a summary, an action), by a host-side
copy of the metric that is given the summed state. A metric whose state is
not a sum (a variable aggregated otherwise) cannot be reduced this way and
is refused when the run starts.

A metric bound to one output (`OnOutput`) reads that output of `y_pred` and
the label (and sample weight) of the same name, as Keras's
`compile(metrics={"click": [...]})` does; its state is the metric's own, so
it is summed and restored as any other.
"""

from collections.abc import Callable, Mapping, Sequence
import dataclasses
import re

import keras
import numpy as np
import tensorflow as tf

from ctl.errors import UserError
from ctl.train import step as step_lib

# Names the run already uses for its own values in the same places.
_RESERVED = frozenset({"loss", "examples", "learning_rate"})
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


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
        host's, which only turn states into results). None: no metrics.
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
    self.names = tuple(self._replica)
    self._sizes = {
      name: [int(np.prod(v.shape)) for v in metric.variables]
      for name, metric in self._replica.items()
    }
    self.size = sum(sum(sizes) for sizes in self._sizes.values())

  @tf.autograph.experimental.do_not_convert
  def variables(self) -> list:
    """Every replica-side state variable (to zero them in replica context)."""
    return [v.value for m in self._replica.values() for v in m.variables]

  def update_states(self, output: step_lib.StepOutput) -> None:
    """Updates every metric from one replica's step output (replica
    context): a metric named in `output.values` averages that value, the
    others compare `y_true` with `y_pred`."""
    values = output.values or {}
    for name, metric in self._replica.items():
      if name in values:
        metric.update_state(values[name], sample_weight=output.sample_weight)
        continue
      y_true, y_pred, weight = (
        output.y_true,
        output.y_pred,
        output.sample_weight,
      )
      key = self._outputs.get(name)
      if key is not None:
        y_pred = _at(y_pred, key, name, "y_pred", required=True)
        y_true = _at(y_true, key, name, "y_true")
        weight = _at(weight, key, name, "sample_weight")
      metric.update_state(y_true, y_pred, sample_weight=weight)

  @tf.autograph.experimental.do_not_convert
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
    for variable in metric.variables:
      if variable.aggregation != "sum":
        raise UserError(
          f"Metric {name!r} cannot be summed across replicas: its variable "
          f"{variable.path} aggregates by {variable.aggregation!r}, not sum."
        )
  return metrics, outputs


def _scalar(name: str, result) -> float:
  value = np.asarray(result)
  if value.size != 1:
    raise UserError(
      f"Metric {name!r} must have a scalar result, got shape {value.shape}."
    )
  return float(value.reshape(()))
