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

The spare is made as soon as a start is made, so it is warm for a failure
that comes soon after; its imports (seconds of CPU) then run beside that
start's own (start-up, restore, tracing), which is a restart's critical
path. So it imports at `WARM_UP_NICENESS` more than it was started with,
until the agent sees that start train past its first loop and writes
`FULL_PRIORITY_LINE` (on busy cores a lowered spare would otherwise not
get warm while the worker trains), or until the hand-over, whichever comes
first. Raising a priority
back needs root or CAP_SYS_NICE (what a container's agent has); a process
that may not (`may_restore_priority`) keeps its priority throughout, so a
worker never runs lowered. Where the kernel schedules by session
(autogroup), the spare's session is lowered as well (`set_niceness`): a
thread's nice alone did not lower it against the worker, and its imports
slowed the restart beside it (issue 37). A hand-over that comes while the
imports still run sets the priority back at once (they finish at the
worker's).
"""

import ast
import importlib
import importlib.util
import json
import os
import resource
import runpy
import sys
import threading
import time

from ctl import env
from ctl import teardown

READY_LINE = "ctl.launch.spare: warm, waiting for a restart"
# What the agent writes to the spare's stdin once the start beside it trains
# steadily: the spare need no longer yield to it.
FULL_PRIORITY_LINE = "full priority"
# How much lower (a larger nice value) the spare's imports run: a tenth of a
# busy core's share against a process at the agent's priority.
WARM_UP_NICENESS = 10


def imports_of(module: str) -> list[str]:
  """The absolute module names `module`'s source imports, in order.

  Top-level and deferred (inside functions) imports alike; a relative
  import is resolved against `module`'s package (the trainer imports its
  own modules so, TensorFlow's among them), and left out where it has none.
  `module` itself is left out. Empty when the source cannot be found.
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
    elif isinstance(node, ast.ImportFrom):
      base = _absolute(node, spec.parent)
      if base:
        names += [f"{base}.{alias.name}" for alias in node.names]
        names.append(base)
  return [name for name in dict.fromkeys(names) if name != module]


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
  """The module a `from X import ...` names, relative ones resolved
  against `package`; None where it cannot be (no package)."""
  if not node.level:
    return node.module
  if not package:
    return None
  try:
    return importlib.util.resolve_name(
      "." * node.level + (node.module or ""), package
    )
  except ImportError:  # Beyond the top-level package.
    return None


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


def may_restore_priority() -> bool:
  """Whether this process may set its nice value back down once raised:
  as root, or within its RLIMIT_NICE (20 - limit is the lowest allowed)."""
  lowest = 20 - resource.getrlimit(resource.RLIMIT_NICE)[0]
  return os.geteuid() == 0 or lowest <= os.getpriority(os.PRIO_PROCESS, 0)


def set_niceness(value: int) -> None:
  """Sets the nice value of every thread of this process (Linux keeps one
  per thread, and a new thread takes its creator's), and of its session
  where it leads one.

  Where the kernel schedules by session (autogroup, on by default in many
  distributions), a thread's nice ranks it only within its session: the
  spare, in a session of its own as the agent starts it, would take a core
  from the worker (another session) as an equal. The session's nice
  (/proc/self/autogroup) ranks the sessions; a process that does not lead
  its session leaves it alone (it would lower its parent's too).
  """
  for thread in os.listdir("/proc/self/task"):
    try:
      os.setpriority(os.PRIO_PROCESS, int(thread), value)
    except ProcessLookupError:  # The thread ended meanwhile.
      pass
  if os.getsid(0) == os.getpid():
    try:
      with open("/proc/self/autogroup", "w", encoding="ascii") as f:
        f.write(str(value))
    except OSError:  # No autogroup in this kernel.
      pass


class _HandOver(threading.Thread):
  """Reads the agent's lines while the imports run.

  `FULL_PRIORITY_LINE` sets the priority back (the start beside the spare
  is past its critical path); the hand-over line (the environment, JSON)
  sets it back too and ends the wait: a restart that comes before the spare
  is warm finishes its imports at the worker's priority, not the spare's.
  End of stdin ends the wait with no environment.
  """

  def __init__(self, restore_to: int | None):
    super().__init__(name="ctl-spare-hand-over", daemon=True)
    self._restore_to = restore_to
    self.environment = None
    self.time = None  # When the line came: the attempt starts there.

  def run(self) -> None:
    for line in sys.stdin:
      if self._restore_to is not None:
        set_niceness(self._restore_to)
        self._restore_to = None
      if line.strip() != FULL_PRIORITY_LINE:
        self.environment = json.loads(line) if line.strip() else None
        break
    self.time = time.time()


def main(argv: list[str]) -> int:
  """`python -m ctl.launch.spare MODULE ARGS...`: warm up, wait, run MODULE."""
  module, *args = argv
  started = os.getpriority(os.PRIO_PROCESS, 0)
  lowered = may_restore_priority()
  if lowered:
    set_niceness(min(19, started + WARM_UP_NICENESS))
  hand_over = _HandOver(started if lowered else None)
  hand_over.start()
  warm_up(module)
  print(READY_LINE, file=sys.stderr, flush=True)
  hand_over.join()
  environment = hand_over.environment
  if environment is None:  # Not needed: only TensorFlow's imports to drop.
    teardown.skip_final_collections()
    return 0
  os.environ.clear()
  os.environ.update(environment)
  os.environ[env.ATTEMPT_START] = f"{hand_over.time:.3f}"
  sys.argv = [module, *args]
  runpy.run_module(module, run_name="__main__", alter_sys=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
