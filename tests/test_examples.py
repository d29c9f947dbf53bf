"""The examples in examples/ run as a user runs them, and do what they say."""

import os
import re
import sys

from ctl.telemetry import ledger
from tests.conftest import REPO
from tests.conftest import read_summary
from trainer.testing import run_command


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
  killed, again = ledger.read(str(tmp_path / "resumed" / "ledger"))
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
