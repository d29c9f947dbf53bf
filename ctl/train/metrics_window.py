"""The training metrics between two log lines, and the log line itself.

The controller adds each train loop's output; at a log step `MetricsWindow`
writes one line for people and the train scalars for TensorBoard, then starts
a new window. It keeps what the run summary reports: the last train metrics
and the throughput of each window.
"""

from collections.abc import Callable
import math

from absl import logging
import numpy as np

from ctl.telemetry import summaries
from ctl.train import loop as loop_lib
from ctl.train import metric_set as metric_set_lib


def _eta(seconds: float | None) -> str:
  """`seconds` as "H:MM:SS", with the days in front past a day."""
  if seconds is None or not math.isfinite(seconds):
    return "unknown (no step measured yet)"
  days, rest = divmod(round(max(seconds, 0.0)), 86400)
  clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
  if not days:
    return clock
  return f"{days} day{'s' if days > 1 else ''} {clock}"


def format_metrics(metrics: dict) -> str:
  """`loss 0.1234  accuracy 0.9876` for a log line (the loss first)."""
  return "  ".join(f"{name} {value:.4f}" for name, value in metrics.items())


class MetricsWindow:
  """Running totals between two log lines, and what they were at the last."""

  def __init__(
    self,
    *,
    train_steps: int,
    global_batch_size: int,
    writer: summaries.ScalarWriter,
    learning_rate: Callable[[], float],
    publish: Callable[[], None] = lambda: None,
    metrics: metric_set_lib.MetricSet | None = None,
  ):
    """Initializes an empty window.

    Args:
      train_steps: the run's last step (for the ETA).
      global_batch_size: examples per step.
      writer: where the train scalars go.
      learning_rate: the optimizer's learning rate now.
      publish: makes what the writer wrote visible (a mirrored directory).
      metrics: the task's metrics (their results come from summed states);
        None: the loss alone.
    """
    self._metric_set = metrics
    self._train_steps = train_steps
    self._global_batch_size = global_batch_size
    self._writer = writer
    self._learning_rate = learning_rate
    self._publish = publish
    self.metrics = {}  # The last window's: loss, and each metric if counted.
    self.throughput = []  # Examples per second of each window.
    self._reset()

  def _reset(self) -> None:
    self._steps = 0
    self._seconds = 0.0
    self._loss_sum = 0.0
    self._metric_state = None  # The metrics' summed state; None: not counted.

  def add(
    self, output: loop_lib.LoopOutput, num_steps: int, seconds: float
  ) -> None:
    """Adds one train loop of `num_steps` that took `seconds`."""
    self._steps += num_steps
    self._seconds += seconds
    self._loss_sum += float(np.sum(output.step_losses))
    if output.metric_state is not None:
      state = output.metric_state.astype(np.float64)
      self._metric_state = (
        state if self._metric_state is None else self._metric_state + state
      )

  def log(self, step: int, extra: dict | None = None) -> None:
    """Logs the window at `step`, writes its scalars (and `extra`), resets.

    The scalars are published at once (TensorBoard reads a mirror)."""
    steps = max(self._steps, 1)
    steps_per_second = self._steps / max(self._seconds, 1e-9)
    examples_per_second = steps_per_second * self._global_batch_size
    self.throughput.append(examples_per_second)
    remaining = (
      (self._train_steps - step) / steps_per_second
      if steps_per_second > 0
      else None
    )
    self.metrics = {"loss": self._loss_sum / steps}
    if self._metric_state is not None:
      self.metrics.update(self._metric_set.results(self._metric_state))
    logging.info(
      "step %d/%d  %s  %.1f examples/s  ETA %s",
      step,
      self._train_steps,
      format_metrics(self.metrics),
      examples_per_second,
      _eta(remaining),
    )
    self._writer.write(
      step,
      {
        **self.metrics,
        "learning_rate": self._learning_rate(),
        "examples_per_second": examples_per_second,
        "steps_per_second": steps_per_second,
        **(extra or {}),
      },
      run=summaries.TRAIN,
    )
    self._publish()
    self._reset()

  def loop_metrics(self, output: loop_lib.LoopOutput) -> dict[str, float]:
    """The metrics of one loop's output alone: its mean loss and, when the
    loop counts them, each metric's result."""
    metrics = {"loss": float(np.mean(output.step_losses))}
    if output.metric_state is not None:
      metrics.update(self._metric_set.results(output.metric_state))
    return metrics

  def median_throughput(self) -> float | None:
    """Examples per second, the median over windows after the first."""
    if not self.throughput:
      return None
    return float(np.median(self.throughput[1:] or self.throughput))
