"""The stall watchdog's last resort: a small process that ends a frozen one.

`ctl.resilience.watchdog` is a Python thread; a C call that holds the GIL silences it.
The backstop covers that case from outside the interpreter: a child process
(this file, standard library only) that the watchdog thread tells, every
poll, how long it may stay silent (`arm`). When that time runs out with no
word from the thread, the child writes one line, has the process dump every
thread's stack (`faulthandler` on SIGUSR2, which needs no GIL) and ends it
with SIGKILL (exit 137).

Why a process and not `faulthandler.dump_traceback_later`: its C thread
counts time while the process is stopped (Ctrl-Z, SIGSTOP), so on `fg` it
woke with the watchdog thread and usually won, ending a stopped-too-long run
with exit 1 instead of the stall line and 75. The child counts only time in
which the process could run: not while the process is stopped (its state in
/proc is T), nor a gap in its own polling (the child itself was stopped, as
Ctrl-Z stops the whole process group). The child ends when the watchdog stops
it or the process dies (end of its pipe), so it never outlives the process.
"""

import contextlib
import faulthandler
import os
import select
import signal
import subprocess
import sys
import time

_POLL_SECS = 0.5
_DUMP_SIGNAL = signal.SIGUSR2
_DUMP_SECS = 2.0  # For the stacks to be written before SIGKILL.
_STDERR = 2


class Backstop:
  """The child process of one watchdog; `arm` re-arms, `close` ends it."""

  def __init__(self):
    faulthandler.register(_DUMP_SIGNAL, file=_STDERR, all_threads=True)
    # No environment: it needs none, and a supervisor that finds its workers
    # by theirs (TF_CONFIG) must not mistake this child for one.
    self._child = subprocess.Popen(
      [sys.executable, "-I", "-S", __file__, str(os.getpid())],
      stdin=subprocess.PIPE,
      close_fds=True,
      env={},
    )

  def arm(self, seconds: float) -> None:
    """Ends the process if no `arm` follows within `seconds` of running."""
    with contextlib.suppress(OSError):  # The child is gone: nothing to arm.
      os.write(self._child.stdin.fileno(), f"{max(seconds, 0.0)}\n".encode())

  def close(self) -> None:
    """Ends the child (end of its pipe) and waits for it."""
    with contextlib.suppress(OSError):
      self._child.stdin.close()
    self._child.wait()
    faulthandler.unregister(_DUMP_SIGNAL)


def _stopped(pid: int) -> bool:
  """Whether process `pid` is stopped (state T or t in /proc/PID/stat)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      state = f.read().rsplit(")", 1)[1].split()[0]
  except (OSError, IndexError):
    return False
  return state in ("T", "t")


def _serve(pid: int) -> None:
  """The child: counts down the armed time of running, then ends `pid`."""
  left, last, pending = None, time.monotonic(), b""
  while True:
    ready, _, _ = select.select([0], [], [], _POLL_SECS)
    now = time.monotonic()
    gap, last = now - last, now
    if ready:
      data = os.read(0, 4096)
      if not data:
        return  # The watchdog stopped, or the process died.
      *lines, pending = (pending + data).split(b"\n")
      if lines:
        left = float(lines[-1])
      continue
    if left is None or gap > 4 * _POLL_SECS or _stopped(pid):
      continue  # Disarmed, or time in which the process could not run.
    left -= gap
    if left < 0:
      _end(pid)
      return


def _end(pid: int) -> None:
  os.write(
    _STDERR,
    f"stall: the stall watchdog of process {pid} could not run (a call "
    "that holds the GIL?); stacks of all threads follow; killing it.\n".encode(),
  )
  with contextlib.suppress(OSError):
    os.kill(pid, _DUMP_SIGNAL)
    time.sleep(_DUMP_SECS)
    os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
  # Ctrl-C and a stop request are for the process (whose end ends this one).
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  _serve(int(sys.argv[1]))
