"""`tests.tasks.regression` trained with the stateful actions that ship,
`ctl.EarlyStopping` and `ctl.KeepBest`, wherever the environment says (run
by test_actions under `ctl-launch` with two workers); prints the chief's
summary line (examples/regression.py's `run_example`).

  python tests/stateful_actions_run.py --model_dir=DIR
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import regression  # noqa: E402

import ctl  # noqa: E402
from tests import tasks  # noqa: E402

if __name__ == "__main__":
  sys.exit(
    regression.run_example(
      sys.argv[1:],
      tasks.regression,
      report=("final_step", "stopped_early", "eval_mae"),
      # An improvement must beat the best MAE by 10: only the first
      # evaluation does, so the counter advances at 10, 15 and stops at 20.
      loop_actions=[
        ctl.EarlyStopping(metric="mae", patience=3, min_delta=10.0),
        ctl.KeepBest(metric="mae"),
      ],
      steps_per_loop=5,
      log_every_steps=5,
      eval_every_steps=5,
      checkpoint_every_steps=5,
    )
  )
