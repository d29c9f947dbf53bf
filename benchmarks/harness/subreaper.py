"""Runs a section's command so that every process it starts is its own.

`run_all` counts a section's CPU as what its process and the children it
reaped used (`resource.getrusage`), and everything else as other processes'.
A section's workers run in sessions of their own (ctl.launch), and the restart
sections SIGKILL agents: their workers become orphans, reparented to init, and
their CPU was counted as another process's, so a quiet machine looked busy.
Run as a script (`python subreaper.py COMMAND...`): it asks Linux to adopt
every orphan of its descendants (PR_SET_CHILD_SUBREAPER), runs COMMAND, and
reaps each orphan as it ends (no zombie looks alive to the section), so their
CPU is in its own, and `run_all`'s, children usage. Whatever still runs
`LEFTOVER_GRACE_SECS` after COMMAND exited is SIGKILLed and named on stderr
(the section's log): a section leaves nothing behind to load the next one.
Exits with COMMAND's code.

Only the standard library, and run as a file: it starts in milliseconds.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

# How long processes a section left behind may take to end by themselves
# (an agent's reaper killing its workers) before they are stopped.
LEFTOVER_GRACE_SECS = 5.0
_PR_SET_CHILD_SUBREAPER = 36  # From <linux/prctl.h>.
_POLL_SECS = 0.05


def main(command: list[str]) -> int:
  if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)
  # A stop (run_all's SIGTERM to the section's group) reaches COMMAND; this
  # process stays to reap what it leaves (a handler, unlike SIG_IGN, is not
  # inherited by COMMAND).
  signal.signal(signal.SIGTERM, lambda *_: None)
  code = _reap_until(subprocess.Popen(command))
  _reap_all(time.monotonic() + LEFTOVER_GRACE_SECS)
  return code


def _reap_until(child: subprocess.Popen) -> int:
  """Reaps every child as it ends, orphans included, until `child` has;
  returns its exit code. An orphan left a zombie would look alive to what
  the section checks (a local tier's owners, a wait for its processes)."""
  while True:
    pid, status = os.waitpid(-1, 0)
    if pid == child.pid:
      child.returncode = os.waitstatus_to_exitcode(status)
      return child.returncode


def _reap_all(deadline: float) -> None:
  """Reaps every child until none is left; past `deadline`, SIGKILLs those
  still running (and then what they leave) and names each once."""
  stopped = set()
  while True:
    try:
      pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
      return
    if pid:
      continue
    if time.monotonic() > deadline:
      for child, name in _living_children():
        if child not in stopped:
          stopped.add(child)
          print(
            f"[subreaper] pid {child} ({name}) still running when the"
            " section ended, stopped",
            file=sys.stderr,
            flush=True,
          )
          os.kill(child, signal.SIGKILL)
    time.sleep(_POLL_SECS)


def _living_children() -> list[tuple[int, str]]:
  """(pid, name) of this process's children that are not zombies (/proc)."""
  found = []
  for entry in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{entry}/stat") as f:
        text = f.read()
    except OSError:  # It ended between the listing and the read.
      continue
    name = text[text.index("(") + 1 : text.rindex(")")]
    state, ppid = text[text.rindex(")") + 2 :].split()[:2]
    if int(ppid) == os.getpid() and state != "Z":
      found.append((int(entry), name))
  return found


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
