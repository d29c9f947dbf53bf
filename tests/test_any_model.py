"""Any model: the examples that are not image classification, each run by
`ctl-launch` with two workers, SIGKILLed mid-run and restarted, end as the
uninterrupted run does (docs/framework.md, "The step is yours")."""

import json
import shutil
import sys

import pytest

from ctl.telemetry import ledger_reader
from tests.conftest import launch_two_workers
from tests.conftest import read_summary
from trainer.testing import run_command

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes


def _serves_a_dict_request(model_dir) -> None:
  """dict_inputs.py's SavedModel serves a dict of token ids and features,
  and returns both heads by name."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  serve = tf.saved_model.load(str(model_dir / "saved_model")).signatures[
    "serving_default"
  ]
  assert set(serve.structured_input_signature[1]) == {"tokens", "features"}
  outputs = serve(
    tokens=tf.constant([[1, 2, 3, 4, 5, 6, 7, 8]], tf.int32),
    features=tf.zeros([1, 4]),
  )
  assert sorted(outputs) == ["positive", "score"]  # Both heads by name.
  assert outputs["positive"].shape == (1,) and outputs["score"].shape == (1, 1)


# Example, the step worker 1 kills itself at (the first loop boundary at or
# after it, in the first attempt only), the checkpoint step before it (the
# restart resumes from one of the two, below), and a check of the
# uninterrupted run's outputs.
_EXAMPLES = [
  ("regression.py", 50, 40, None),
  ("dict_inputs.py", 70, 60, _serves_a_dict_request),
  ("custom_step.py", 60, 40, None),
]


def _launch(example: str, model_dir, *, faults: str | None = None) -> dict:
  """examples/EXAMPLE on two workers: the chief's printed summary line."""
  return launch_two_workers(f"examples/{example}", model_dir, faults=faults)


@pytest.mark.parametrize("example,kill_at,saved_before,check", _EXAMPLES)
def test_an_example_killed_on_two_workers_ends_as_the_uninterrupted_run(
  tmp_path, example, kill_at, saved_before, check
):
  uninterrupted = _launch(example, tmp_path / "uninterrupted")
  if check:
    check(tmp_path / "uninterrupted")
  killed_dir = tmp_path / "killed"
  resumed = _launch(
    example, killed_dir, faults=f"crash@{kill_at}:worker=1:attempt=0"
  )
  # The same weights bit for bit, and the same final metrics: the user's
  # metrics are reduced from sums and counts, whatever the path.
  assert resumed == uninterrupted
  first, second = ledger_reader.read(str(killed_dir / "ledger"))
  # The first attempt ended when its peer was killed, not done.
  assert [e["outcome"] for e in first if e["event"] == "end"] != ["done"]
  (restore,) = [e for e in second if e.get("phase") == "restore"]
  # The kill's own step was saved to the local tiers just before it, and
  # that write is asynchronous (ctl.checkpoint.tiers.checkpoint_tiers): it
  # is restored when its commit beat the kill, the step before it when not.
  # Which one wins is the machine's timing, and both end identical (above).
  assert restore["step"] in (saved_before, kill_at)
  summary = read_summary(str(killed_dir))
  assert summary["restarts"] == 1 and summary["final_step"] == 120


@pytest.mark.browser
@pytest.mark.skipif(
  not all(map(shutil.which, ("chromium", "chromedriver"))),
  reason="needs a browser: apt-get install -y chromium chromium-driver",
)
def test_a_browser_draws_the_regressions_own_metrics(tmp_path):
  """Headless Chromium on TensorBoard's time-series page of the regression
  example: the user's MAE and RMSE, by the names the task gave them, each in
  one chart with a train and a validation line (make browser-check)."""
  model_dir = tmp_path / "run"
  run_command(
    [sys.executable, "examples/regression.py", f"--model_dir={model_dir}"]
  )
  out = tmp_path / "tensorboard.png"
  run_command(
    [
      sys.executable,
      "scripts/tensorboard_screenshot.py",
      f"--logdir={model_dir / 'tensorboard'}",
      f"--out={out}",
      "--tag_filter=^(loss|mae|rmse)$",
    ],
    timeout=600,
  )
  cards = json.loads(out.with_suffix(".json").read_text())["cards"]
  assert sorted(card["title"] for card in cards) == ["loss", "mae", "rmse"]
  for card in cards:  # One chart per tag, a line of each run in it.
    assert card["runs"] == ["train", "validation"], card
    assert card["colors"] == 2, card
  assert out.read_bytes().startswith(b"\x89PNG")
