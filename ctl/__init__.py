"""ctl: a fault-tolerant custom-training-loop framework for TensorFlow.

The framework knows nothing of models, datasets or absl flags: it takes plain
Python objects and a strategy. What a user calls:

  ctl.run(task=ctl.Task(...), options=ctl.RunOptions(...), strategy=...)

or with `loop_actions=[fn]`, each `fn(step, ctl.LoopResult)` called after
every train loop (one may raise `ctl.StopTraining` to end the run there,
cleanly; ctl.train.actions), which raises `ctl.UserError` (a mistake to fix), `ctl.Preempted` (stopped on
request after saving; run again) or `ctl.TrainingDiverged`; entry points exit
with `ctl.USER_ERROR_EXIT_CODE` and `ctl.PREEMPTED_EXIT_CODE` for the first
two, and with `ctl.STALL_EXIT_CODE` for `ctl.Stalled` (start-up gave up
waiting; a stall watchdog, ctl.resilience.watchdog, exits with it too),
`ctl.CANNOT_WRITE_EXIT_CODE` for `ctl.CannotWrite` (an output could not be
written) and `ctl.LeaseLost`'s own `exit_code` (another trainer took the run
directory over, or its lease vanished: `ctl.LeaseVanished`) and
`ctl.PeerLost`'s (a peer's node was lost or cut off mid-run; the message
names it; ctl.distributed.peer_loss); `ctl.exit_code(error)` gives each of
these its code, as the trainer exits. The
modules live in folders by role (`ctl.train.controller`, `ctl.train.options`,
...; docs/design.md, "Layers").

A job of several workers takes its strategy, chief, job id and output
directories from the platform's environment (TF_CONFIG, Vertex AI, a GKE
JobSet) in one call, the reference trainer's own path
(ctl.distributed.environment, ctl.resilience.worker_start):

  env = ctl.environment(model_dir="runs/x")
  ctl.run(task=..., strategy=env.strategy,
          options=ctl.RunOptions(**env.option_values(), train_steps=N))

`run`, `Task`, `RunOptions` and `environment` are loaded on first use: they
import TensorFlow (`environment` when called), which `import ctl` (and the
command-line tools' `--help`) need not pay for.
"""

import importlib

from ctl.errors import CANNOT_WRITE_EXIT_CODE
from ctl.errors import LEASE_LOST_EXIT_CODE
from ctl.errors import PREEMPTED_EXIT_CODE
from ctl.errors import STALL_EXIT_CODE
from ctl.errors import USER_ERROR_EXIT_CODE
from ctl.errors import CannotWrite
from ctl.errors import LeaseLost
from ctl.errors import LeaseVanished
from ctl.errors import PeerLost
from ctl.errors import Preempted
from ctl.errors import Stalled
from ctl.errors import TrainingDiverged
from ctl.errors import UserError
from ctl.errors import exit_code

_LAZY = {
  "run": "ctl.train.controller",
  "Task": "ctl.train.options",
  "RunOptions": "ctl.train.options",
  "LoopResult": "ctl.train.actions",
  "StopTraining": "ctl.train.actions",
  "EarlyStopping": "ctl.train.actions",
  "KeepBest": "ctl.train.actions",
  "StepOutput": "ctl.train.step",
  "StepContext": "ctl.train.step",
  "Serving": "ctl.checkpoint.serving",
  "OnOutput": "ctl.train.metric_set",
  "image_classification": "ctl.train.options",
  "environment": "ctl.resilience.worker_start",
}

__all__ = [
  "CANNOT_WRITE_EXIT_CODE",
  "CannotWrite",
  "EarlyStopping",
  "LEASE_LOST_EXIT_CODE",
  "LeaseLost",
  "LeaseVanished",
  "KeepBest",
  "OnOutput",
  "Serving",
  "StepContext",
  "StepOutput",
  "image_classification",
  "PREEMPTED_EXIT_CODE",
  "STALL_EXIT_CODE",
  "USER_ERROR_EXIT_CODE",
  "LoopResult",
  "Preempted",
  "RunOptions",
  "PeerLost",
  "Stalled",
  "StopTraining",
  "Task",
  "TrainingDiverged",
  "UserError",
  "environment",
  "exit_code",
  "run",
]


def __getattr__(name: str):
  if name not in _LAZY:
    raise AttributeError(f"module 'ctl' has no attribute {name!r}")
  value = getattr(importlib.import_module(_LAZY[name]), name)
  globals()[name] = value  # Found directly from now on.
  return value


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(__all__))
