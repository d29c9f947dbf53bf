"""Any model: the examples that are not image classification, each run by
`ctl-launch` with two workers, SIGKILLed mid-run and restarted, end as the
uninterrupted run does (docs/framework.md, "The step is yours")."""

import json
import os
import sys

import pytest

from ctl.telemetry import ledger
from tests.conftest import REPO
from tests.conftest import read_summary
from trainer.testing import run_command
from trainer.testing import trainer_env

# Example, the step worker 1 kills itself at (the first loop boundary at or
# after it, in the first attempt only), the checkpoint step it resumes from.
_EXAMPLES = [
  ("regression.py", 50, 40),
  ("dict_inputs.py", 70, 60),
  ("custom_step.py", 60, 40),
]


def _launch(example: str, model_dir, *, faults: str | None = None) -> dict:
  """`ctl.launch --num_workers=2 -- python examples/EXAMPLE`; the chief's
  printed summary line."""
  command = [
    sys.executable,
    "-m",
    "ctl.launch",
    "--num_workers=2",
    f"--max_restarts={1 if faults else 0}",
    "--",
    sys.executable,
    os.path.join(REPO, "examples", example),
    f"--model_dir={model_dir}",
  ]
  result = run_command(command, env=trainer_env(faults=faults), timeout=420)
  (line,) = [x for x in result.stdout.splitlines() if x.endswith("}")]
  return json.loads(line.split("] ", 1)[-1])  # The launcher's prefix off.


@pytest.mark.parametrize("example,kill_at,resumed_from", _EXAMPLES)
def test_an_example_killed_on_two_workers_ends_as_the_uninterrupted_run(
  tmp_path, example, kill_at, resumed_from
):
  uninterrupted = _launch(example, tmp_path / "uninterrupted")
  killed_dir = tmp_path / "killed"
  resumed = _launch(
    example, killed_dir, faults=f"crash@{kill_at}:worker=1:attempt=0"
  )
  # The same weights bit for bit, and the same final metrics: the user's
  # metrics are reduced from sums and counts, whatever the path.
  assert resumed == uninterrupted
  first, second = ledger.read(str(killed_dir / "ledger"))
  # The first attempt ended when its peer was killed, not done.
  assert [e["outcome"] for e in first if e["event"] == "end"] != ["done"]
  (restore,) = [e for e in second if e.get("phase") == "restore"]
  assert restore["step"] == resumed_from
  summary = read_summary(str(killed_dir))
  assert summary["restarts"] == 1 and summary["final_step"] == 120
