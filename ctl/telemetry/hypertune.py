"""Reports the tuning metric to Vertex AI hyperparameter tuning.

Under a Vertex AI hyperparameter tuning job each trial is told where to write
its metric (`CLOUD_ML_HP_METRIC_FILE`, default `/tmp/hypertune/output.metrics`)
and Vertex AI reads the trial's measurements from it. `cloudml-hypertune` owns
that file format: one JSON object per line with the metric tag, its value, the
global step and the trial id (`CLOUD_ML_TRIAL_ID`), keeping the latest 100
reports. Outside a tuning job the file is written but nobody reads it, so the
trainer does not need to know where it runs.
"""

import hypertune

from ctl import errors


class MetricReporter:
  """Writes the tuning metric after each evaluation, on the chief only.

  In a multi-worker job every worker computes the same reduced metric; only the
  chief reports it, so one trial has one writer of its metric file.
  """

  def __init__(self, metric_name: str, *, is_chief: bool):
    """Initializes the reporter.

    Args:
      metric_name: The tag Vertex AI optimizes, the `metricId` of the tuning
        job's `studySpec`, e.g. "accuracy".
      is_chief: Whether this process reports. Other workers get a reporter that
        does nothing and creates no files.

    Raises:
      errors.UserError: If `metric_name` is empty.
    """
    if not metric_name:
      raise errors.UserError(
        "The hyperparameter tuning metric name must not be empty."
      )
    self._metric_name = metric_name
    # One HyperTune per process: it rewrites the file from its own queue of
    # reports, so a second instance would drop the earlier lines.
    self._hypertune = hypertune.HyperTune() if is_chief else None

  def report(self, value: float, step: int) -> None:
    """Records `value` as the metric at global step `step`.

    Args:
      value: The metric; anything `float()` accepts, e.g. a scalar tensor.
      step: The global training step the metric was computed at.
    """
    if self._hypertune is None:
      return
    self._hypertune.report_hyperparameter_tuning_metric(
      hyperparameter_metric_tag=self._metric_name,
      metric_value=float(value),
      global_step=int(step),
    )
