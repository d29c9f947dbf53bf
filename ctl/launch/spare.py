"""A warm spare: the next worker process, started early and blocked.

`ctl.launch --agent --warm_spare` restarts its worker into a process that
has already paid for its interpreter start and its imports (TensorFlow, the
trainer), which is most of a small model's cold start, instead of starting
a new one after the failure. The agent starts the spare as

  python -m ctl.launch.spare MODULE ARGS...

for a worker command `python -m MODULE ARGS...`. The spare imports every
module that MODULE imports, at the top or inside its functions (the trainer
defers TensorFlow to `main` so that `--help` stays fast), but not MODULE
itself: its flags are defined when it runs, once. Nothing that depends on
the cluster happens before the hand-over (no TF_CONFIG is read, no
TensorFlow runtime or strategy is made).

Then it blocks on its stdin. The agent hands a restart over by writing one
JSON line, the worker's whole environment for that start (restart count,
previous exit, heartbeat directory, ...); the spare takes it, notes the
hand-over time in `CTL_ATTEMPT_START` (so the run ledger counts this
attempt's start-up from there, not from when the spare was made), and runs
MODULE as `__main__` with ARGS, as `python -m` would. End of its stdin
without a line (the agent finished or died) ends it quietly with 0.

It writes `READY_LINE` to its stderr when its imports are done: for a person
reading the agent's output, and for the benchmark that must kill a worker
only once the spare is warm.
"""

import ast
import importlib
import importlib.util
import json
import os
import runpy
import sys
import time

from ctl import env

READY_LINE = "ctl.launch.spare: warm, waiting for a restart"


def imports_of(module: str) -> list[str]:
  """The absolute module names `module`'s source imports, in order.

  Top-level and deferred (inside functions) imports alike; relative imports
  and `module` itself are left out. Empty when the source cannot be found.
  """
  spec = importlib.util.find_spec(module)
  if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
    return []
  with open(spec.origin, encoding="utf-8") as f:
    tree = ast.parse(f.read(), filename=spec.origin)
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names += [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names += [f"{node.module}.{alias.name}" for alias in node.names]
      names.append(node.module)
  return [name for name in dict.fromkeys(names) if name != module]


def warm_up(module: str) -> None:
  """Imports what `module` imports; a name that is not a module is skipped.

  (`from os import path` names a module; `from json import dumps` a
  function, which the import of `json` covers.)
  """
  for name in imports_of(module):
    try:
      importlib.import_module(name)
    except ImportError:
      pass


def wait_for_hand_over() -> dict[str, str] | None:
  """Blocks until the agent writes the environment line; None at its end."""
  line = sys.stdin.readline()
  return json.loads(line) if line.strip() else None


def main(argv: list[str]) -> int:
  """`python -m ctl.launch.spare MODULE ARGS...`: warm up, wait, run MODULE."""
  module, *args = argv
  warm_up(module)
  print(READY_LINE, file=sys.stderr, flush=True)
  environment = wait_for_hand_over()
  if environment is None:
    return 0
  os.environ.clear()
  os.environ.update(environment)
  os.environ[env.ATTEMPT_START] = f"{time.time():.3f}"
  sys.argv = [module, *args]
  runpy.run_module(module, run_name="__main__", alter_sys=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
