"""`tests.tasks.regression` with a loop action that stops the run on the
chief only, at step 10 (a decision from the chief's own state, not from the
reduced metrics); run by test_actions under `ctl-launch` with two workers;
prints the chief's summary line (examples/regression.py's `run_example`).

  python tests/chief_stop_run.py --model_dir=DIR
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import regression  # noqa: E402

import ctl  # noqa: E402
from tests import tasks  # noqa: E402


def stop_on_the_chief(step, result):
  """Stops the run at step 10, on the chief only."""
  if result.is_chief and step == 10:
    raise ctl.StopTraining("the chief's own decision")


if __name__ == "__main__":
  sys.exit(
    regression.run_example(
      sys.argv[1:],
      tasks.regression,
      report=("final_step", "stopped_early"),
      loop_actions=[stop_on_the_chief],
      steps_per_loop=5,
      log_every_steps=5,
      eval_every_steps=5,
      checkpoint_every_steps=10,
    )
  )
