"""Which process a pid names on this host, across pid reuse and containers.

A pid alone names a process only while it runs, only in one pid namespace
(a container has its own) and only until the kernel hands it to another.
A process's identity here is its pid's start time (in clock ticks since
boot), its pid namespace, its time namespace (which shifts the start times
/proc shows) and the kernel's boot id, read from /proc: two records of one
identity name one process, and a record's process has ended for certain
when, on the same boot and in the same namespaces, its pid runs no process
of that start time. Where /proc cannot say, nothing is certain (""
identity). A process's state (`state`) and this process's age (`age`) are
read from the same fields: the one reader of /proc's process stat in ctl
but the stall backstop's child, which imports nothing of ctl.
"""

import os


def pid_alive(pid: int) -> bool:
  """Whether process `pid` runs on this host (someone else's counts).

  The one such check in ctl: a pid read from a file or a name may be
  anything, and `os.kill` takes 0 and below for process groups (0: this
  one, -1: every process), so only a positive whole number can be alive.
  A zombie (ended, not yet reaped) is not; where /proc cannot say, one
  that `os.kill` finds counts.
  """
  if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
    return False
  try:
    os.kill(pid, 0)
  except (ProcessLookupError, OverflowError):  # Gone, or past any pid.
    return False
  except PermissionError:
    pass  # Someone else's process.
  return state(pid) != "Z"  # "" where /proc cannot say: it runs.


def state(pid: int) -> str:
  """Process `pid`'s state letter in /proc (R, S, T for stopped, Z for a
  zombie, ...; field 3 of its stat); "" where unreadable."""
  fields = _stat_fields(pid)
  return fields[0].decode() if fields else ""


def identity(pid: int) -> str:
  """Process `pid`'s identity on this host ("" where /proc cannot say,
  or where it names none):
  `<boot id>/<pid namespace>/<time namespace>/<start time>`."""
  started = _start_time(pid)
  where = _this_kernel_and_namespace()
  return f"{where}/{started}" if started and where else ""


def ended(pid: int, recorded: str) -> bool:
  """Whether the process `recorded` (an `identity(pid)` read earlier, on
  some host) has ended for certain: recorded on this boot and in this pid
  and time namespaces, and its pid now runs no process of its start time
  (none, a zombie, or another that reused the pid). False wherever it may
  run (a live pid whose start time cannot be read, as under /proc's
  hidepid)."""
  where, _, started = recorded.rpartition("/")
  if not started or not where or where != _this_kernel_and_namespace():
    return False
  if not pid_alive(pid):
    return True
  now = _start_time(pid)  # "" where unreadable (hidepid): proves nothing.
  return bool(now) and now != started


def comparable(recorded: str) -> bool:
  """Whether pids of the process `recorded` mean what they mean here (the
  same boot, pid and time namespaces), or it is unknown (""): a record
  written before identities were, judged by its pid as then."""
  where, _, started = recorded.rpartition("/")
  return not started or where == _this_kernel_and_namespace()


def age() -> float | None:
  """Seconds since this process started, or None where /proc cannot say.

  Read from /proc (Linux: the boot clock, to about 10 ms), so a step of the
  wall clock changes nothing.
  """
  started = _start_time("self")  # Not a pid: /proc may be a host's.
  try:
    with open("/proc/uptime") as f:
      uptime = float(f.read().split()[0])
    return max(0.0, uptime - int(started) / os.sysconf("SC_CLK_TCK"))
  except (OSError, ValueError):  # "" start: unreadable.
    return None


def _start_time(pid: int | str) -> str:
  """The start time of process `pid` ("self": this one), in clock ticks
  after boot (field 22 of its stat); "" where unreadable."""
  fields = _stat_fields(pid)
  return fields[19].decode() if len(fields) > 19 else ""


def _stat_fields(pid: int | str) -> list[bytes]:
  """The fields of /proc/<pid>/stat (`pid` "self": this process's) from the
  third on ([] where unreadable): the command name, field 2, may hold
  anything, so they are counted from its closing parenthesis."""
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      return f.read().rsplit(b")", 1)[1].split()
  except (OSError, IndexError):
    return []


def _this_kernel_and_namespace() -> str:
  """`<boot id>/<pid namespace>/<time namespace>` of this process ("-" for
  a kernel without time namespaces); "" where /proc cannot say, or where
  its pids are not this namespace's (a host's /proc mounted in a
  container)."""
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      boot = f.read().strip()
    namespace = os.readlink("/proc/self/ns/pid")
    own_pid = int(os.readlink("/proc/self"))  # This pid as /proc counts.
  except (OSError, ValueError):
    return ""
  try:  # Start times in /proc are shifted by the reader's time namespace.
    clocks = os.readlink("/proc/self/ns/time")
  except FileNotFoundError:  # Linux before 5.6: none.
    clocks = "-"
  except OSError:
    return ""
  return f"{boot}/{namespace}/{clocks}" if own_pid == os.getpid() else ""
