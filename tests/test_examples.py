"""The examples in examples/ run as a user runs them, and do what they say."""

import os
import re
import sys

import pytest

from ctl.telemetry import ledger_reader
from tests.conftest import REPO
from tests.conftest import read_scalars
from tests.conftest import read_summary
from trainer.testing import run_command

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes


def _run_example(name: str, model_dir) -> str:
  """Runs `python examples/<name> --model_dir=...`; returns its stdout."""
  script = os.path.join(REPO, "examples", name)
  result = run_command(
    [sys.executable, script, f"--model_dir={model_dir}"], timeout=240
  )
  return result.stdout


def test_own_model_killed_once_ends_with_the_uninterrupted_weights(tmp_path):
  stdout = _run_example("own_model.py", tmp_path)

  uninterrupted = read_summary(str(tmp_path / "uninterrupted"))
  resumed = read_summary(str(tmp_path / "resumed"))
  assert uninterrupted["final_step"] == resumed["final_step"] == 60
  assert (uninterrupted["restores"], resumed["restores"]) == (0, 1)
  assert uninterrupted["weights_fingerprint"] == resumed["weights_fingerprint"]
  assert "ended with -9" in stdout and "Same weights" in stdout
  # The killed attempt got past step 40's checkpoint, to step 50; the next
  # one restored step 40 and trained on from there.
  killed, again = ledger_reader.read(str(tmp_path / "resumed" / "ledger"))
  steps = [e["step"] for e in killed if e.get("phase") == "train_loop"]
  assert max(steps) == 50
  assert not [e for e in killed if e["event"] == "end"]
  (restore,) = [e for e in again if e.get("phase") == "restore"]
  assert restore["step"] == 40


def test_from_model_fit_trains_the_same_model_both_ways(tmp_path):
  stdout = _run_example("from_model_fit.py", tmp_path)

  accuracies = re.findall(
    r"(model\.fit|ctl\.run): eval accuracy (\S+);", stdout
  )
  assert [way for way, _ in accuracies] == ["model.fit", "ctl.run"]
  # Three classes: both learned well past chance (1/3) on the same data.
  assert all(float(accuracy) > 0.6 for _, accuracy in accuracies), stdout
  assert not (tmp_path / "fit_backup").exists()  # Deleted by Keras at the end.
  summary = read_summary(str(tmp_path / "ctl_run"))
  assert summary["final_step"] == 60
  assert (tmp_path / "ctl_run" / "saved_model" / "saved_model.pb").is_file()


def test_loop_action_stops_early_where_validation_accuracy_stopped_improving(
  tmp_path,
):
  stdout = _run_example("loop_action.py", tmp_path)

  run = tmp_path / "run"
  summary = read_summary(str(run))
  stopped = summary["stopped_early"]
  assert stopped["step"] == summary["final_step"] < 400, stdout
  # The rule, replayed on the validation accuracy the run wrote: the stop
  # is the third evaluation in a row not 0.005 above the best.
  evals = read_scalars(str(run / "tensorboard" / "validation"))["accuracy"]
  best, waited, stop_step = None, 0, None
  for step, accuracy in evals:
    if best is None or accuracy > best + 0.005:
      best, waited = accuracy, 0
    else:
      waited += 1
      if waited == 3:
        stop_step = step
        break
  assert stopped["step"] == stop_step
  assert evals[-1][0] == stop_step  # Not evaluated again at the end.
  assert f"{best:.4f}" in stopped["reason"]
  assert (run / "saved_model" / "saved_model.pb").is_file()
  (attempt,) = ledger_reader.read(str(run / "ledger"))
  assert attempt[-1]["outcome"] == "done" and attempt[-1]["step"] == stop_step
  assert f"final_step {stop_step} of 400" in stdout
