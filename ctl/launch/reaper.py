"""No orphans: worker processes die with the launcher that started them.

A launcher (ctl.launch) killed by SIGKILL or the OOM killer runs no cleanup,
and its workers would be reparented to init and train on, unsupervised, next
to whatever is launched after it. Two mechanisms, both Linux-first:

- `die_with_parent()`: a `preexec_fn` that asks the kernel for SIGKILL when
  the parent goes (prctl PR_SET_PDEATHSIG; `die_with` in a pool's worker).
  The signal fires when the *thread* that forked the worker exits, so
  workers must be started from a thread that lives as long as the launcher
  (its main thread).
- `Reaper`: a small process the launcher starts with a pipe on its stdin (run
  from this file). The launcher tells it, a line each, the process groups of
  its workers (`group PGID`, `forget PGID` once it reaped one itself) and the
  directories it owns (`dir PATH`). A launcher that exits cleanly writes
  `done`; end of file without `done` means it died, and the reaper SIGKILLs
  every group it still holds (what workers started, too) and removes the
  directories. Forgetting a group as soon as it is reaped keeps the reaper
  from signalling a reused process group id.

Only the standard library is used here: the reaper process runs this file as
a script, fast, whatever the launcher's import path.
"""

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1  # From <linux/prctl.h>.


def die_with_parent():
  """A `preexec_fn` that SIGKILLs the child when its parent exits, or None.

  None off Linux, where there is no parent-death signal (the `Reaper` still
  applies).
  """
  if not sys.platform.startswith("linux"):
    return None
  # Looked up before fork: the child only calls it.
  return functools.partial(
    die_with, os.getpid(), prctl=ctypes.CDLL(None, use_errno=True).prctl
  )


def die_with(parent: int, *, prctl=None) -> None:
  """In a child of process `parent`: SIGKILL this process when `parent`
  exits, or at once if it already has (it died before the request took
  effect). Linux only; also a process pool's `initializer` (with
  `initargs=(os.getpid(),)`), which must be picklable.
  """
  (prctl or ctypes.CDLL(None, use_errno=True).prctl)(
    _PR_SET_PDEATHSIG, signal.SIGKILL
  )
  if os.getppid() != parent:
    os.kill(os.getpid(), signal.SIGKILL)


class Reaper:
  """The launcher's side: starts the reaper process and tells it what to clean.

  A context manager: on a clean exit from the `with` block the reaper is told
  `done` and waited for. Messages that cannot be delivered (the reaper itself
  was killed) are dropped: the parent-death signal still applies.
  """

  def __init__(self):
    self._process = subprocess.Popen(
      # -P: this file's directory (ctl/) must not shadow standard modules.
      [sys.executable, "-P", os.path.abspath(__file__)],
      stdin=subprocess.PIPE,
      stdout=subprocess.DEVNULL,
      start_new_session=True,  # A Ctrl-C to the launcher's group spares it.
    )

  def __enter__(self) -> "Reaper":
    return self

  def __exit__(self, *exc_info) -> None:
    self._tell("done")
    try:
      self._process.stdin.close()
    except OSError:
      pass
    self._process.wait()

  def watch_group(self, pgid: int) -> None:
    """Kill process group `pgid` if the launcher dies."""
    self._tell(f"group {pgid}")

  def forget_group(self, pgid: int) -> None:
    """Group `pgid` was reaped by the launcher: leave it alone."""
    self._tell(f"forget {pgid}")

  def remove_dir(self, path: str) -> None:
    """Remove directory `path` if the launcher dies."""
    self._tell(f"dir {path}")

  def _tell(self, line: str) -> None:
    try:
      self._process.stdin.write(f"{line}\n".encode())
      self._process.stdin.flush()
    except OSError:  # BrokenPipeError: the reaper is gone.
      pass


def _main() -> None:
  """The reaper process: reads orders until `done` or the launcher's death."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # Only end of file ends it.
  groups, dirs = set(), []
  for line in sys.stdin.buffer:
    order, _, arg = line.decode().rstrip("\n").partition(" ")
    if order == "done":
      return
    if order == "group":
      groups.add(int(arg))
    elif order == "forget":
      groups.discard(int(arg))
    elif order == "dir":
      dirs.append(arg)
  for pgid in groups:
    try:
      os.killpg(pgid, signal.SIGKILL)
    except OSError:  # ProcessLookupError: that group has exited.
      pass
  for path in dirs:
    shutil.rmtree(path, ignore_errors=True)
  print(
    f"[reaper] the launcher died: killed {len(groups)} worker process "
    f"group(s), removed {len(dirs)} directory(ies)",
    file=sys.stderr,
    flush=True,
  )


if __name__ == "__main__":
  _main()
