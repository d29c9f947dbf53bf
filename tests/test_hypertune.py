"""Tests for ctl.telemetry.hypertune: the file Vertex AI reads back, written for real."""

import json

import numpy as np
import pytest

from ctl import errors
from ctl.telemetry import hypertune


@pytest.fixture(name="metric_file")
def fixture_metric_file(tmp_path, monkeypatch):
  """Points cloudml-hypertune at a file in a directory that does not exist."""
  path = tmp_path / "hypertune" / "output.metrics"
  monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
  monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "7")
  return path


def test_chief_reports_every_evaluation_in_order(metric_file):
  reporter = hypertune.MetricReporter("accuracy", is_chief=True)

  reporter.report(0.5, step=100)
  reporter.report(np.float32(0.75), step=200)

  lines = [json.loads(line) for line in metric_file.read_text().splitlines()]
  assert [(line["accuracy"], line["global_step"]) for line in lines] == [
    ("0.5", "100"),
    ("0.75", "200"),
  ]
  assert {line["trial"] for line in lines} == {"7"}


def test_non_chief_writes_nothing(metric_file):
  reporter = hypertune.MetricReporter("accuracy", is_chief=False)

  reporter.report(0.5, step=100)

  assert not metric_file.parent.exists()


def test_empty_metric_name_is_a_user_error(metric_file):
  with pytest.raises(errors.UserError, match="must not be empty"):
    hypertune.MetricReporter("", is_chief=True)
  assert not metric_file.parent.exists()
