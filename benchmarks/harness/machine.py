"""The machine's state over a section: was it quiet enough to decide?

A benchmark on a shared machine measures the machine as much as the code: a
test run beside it, or a hypervisor stealing the CPU, moves every rate. So
`run_all` takes a snapshot before and after each section's process and puts
the state between them beside the section's numbers (`state()`): the load
average, the CPU's steal and iowait shares from `/proc/stat`, the CPU
frequency where it is visible, how much CPU other processes used and the
busiest of them (from `/proc/<pid>/stat`; no psutil). A section measured
while the machine was BUSY (other processes used more than
`BUSY_OTHERS_CORES` of a core on average, or more than `BUSY_STEAL_PERCENT`
of the CPU was stolen) says so, and its verdicts are UNDECIDED (`judge()`):
its numbers are still shown, nothing is decided from them.

"Other processes" is everything but the section's: the CPU time of the whole
machine less what the section's process and the children it reaped used
(`resource.getrusage`, so short-lived processes count too; `subreaper`
adopts the orphans of the section's killed processes, so they count as
reaped) and less `run_all`'s own. iowait is reported, not judged: a checkpoint section waits
for its own writes.
"""

from collections.abc import Mapping
import dataclasses
import glob
import os
import resource
import time

from benchmarks.harness import stats

# Other processes' CPU, in cores on average over the section, above which
# the section's timings are not trusted (a quarter of a core moves a 2-core
# machine's rates by several percent, the size of the differences measured).
BUSY_OTHERS_CORES = 0.25
# Stolen CPU (a hypervisor running other guests), in % of all CPU time.
BUSY_STEAL_PERCENT = 5.0
_BUSIEST = 3  # How many of the busiest other processes are named.
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# The /proc/stat "cpu" line's columns, in order (later ones: guest time,
# already counted in user).
_CPU_COLUMNS = (
  "user",
  "nice",
  "system",
  "idle",
  "iowait",
  "irq",
  "softirq",
  "steal",
)
_WORKING = ("user", "nice", "system", "irq", "softirq")


@dataclasses.dataclass(frozen=True)
class Snapshot:
  """What the machine looked like at one moment.

  Attributes:
    clock: time.monotonic() seconds.
    cpu: /proc/stat's "cpu" line, {column: ticks} (empty where unreadable).
    processes: {pid: (name, session id, CPU seconds so far)}.
    own_seconds: CPU seconds of this process and the children it reaped.
    load: the 1-minute load average (None where unknown).
    cpu_mhz: the mean CPU frequency (None where not visible).
  """

  clock: float
  cpu: Mapping[str, int]
  processes: Mapping[int, tuple[str, int, float]]
  own_seconds: float
  load: float | None
  cpu_mhz: float | None


def parse_cpu_line(proc_stat: str) -> dict[str, int]:
  """{column: ticks} of the all-CPU "cpu" line of /proc/stat's text."""
  for line in proc_stat.splitlines():
    fields = line.split()
    if fields and fields[0] == "cpu":
      values = [int(v) for v in fields[1 : 1 + len(_CPU_COLUMNS)]]
      return dict(zip(_CPU_COLUMNS, values))
  return {}


def parse_process_stat(text: str) -> tuple[str, int, float]:
  """(name, session id, CPU seconds) from a /proc/<pid>/stat line.

  The name is in brackets and may hold spaces and brackets itself, so the
  fields are counted from its last closing bracket.
  """
  name = text[text.index("(") + 1 : text.rindex(")")]
  fields = text[text.rindex(")") + 2 :].split()
  # After the name: state ppid pgrp session ... utime (12th) stime (13th).
  session, utime, stime = int(fields[3]), int(fields[11]), int(fields[12])
  return name, session, (utime + stime) / _TICKS


def parse_cpu_mhz(cpuinfo: str) -> float | None:
  """The mean of /proc/cpuinfo's "cpu MHz" lines, or None without any."""
  values = [
    float(line.split(":")[1])
    for line in cpuinfo.splitlines()
    if line.startswith("cpu MHz")
  ]
  return sum(values) / len(values) if values else None


def snapshot(proc: str = "/proc", sysfs: str = "/sys") -> Snapshot:
  """The machine now, read from `proc` and `sysfs` (/proc- and /sys-like
  directories)."""
  own = [
    resource.getrusage(who)
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
  ]
  return Snapshot(
    clock=time.monotonic(),
    cpu=parse_cpu_line(_read(os.path.join(proc, "stat"))),
    processes=_processes(proc),
    own_seconds=sum(u.ru_utime + u.ru_stime for u in own),
    load=_load(proc),
    cpu_mhz=_cpu_mhz(proc, sysfs),
  )


def state(before: Snapshot, after: Snapshot, *, session: int) -> dict:
  """The machine between two snapshots, for a section's "machine" field.

  Args:
    before: taken as the section's process started.
    after: taken after it ended (and was reaped).
    session: the section's session id (its processes are not "others").

  Returns:
    {"seconds", "load_start", "load_end", "steal_percent",
    "iowait_percent", "others_cores", "cpu_mhz", "busiest", "busy",
    "why"}: busiest lists {"pid", "name", "cores"} of the other processes
    that used the most CPU; why says what made it busy (None when quiet).
  """
  seconds = max(after.clock - before.clock, 1e-9)
  ticks = {k: after.cpu.get(k, 0) - before.cpu.get(k, 0) for k in _CPU_COLUMNS}
  total = sum(ticks.values())
  working = sum(ticks[k] for k in _WORKING) / _TICKS
  own = after.own_seconds - before.own_seconds
  share = (lambda k: 100 * ticks[k] / total) if total else (lambda k: None)
  result = {
    "seconds": round(seconds, 1),
    "load_start": before.load,
    "load_end": after.load,
    "steal_percent": share("steal"),
    "iowait_percent": share("iowait"),
    "others_cores": max(0.0, working - own) / seconds if total else None,
    "cpu_mhz": after.cpu_mhz or before.cpu_mhz,
    "busiest": _busiest(before, after, session, seconds),
  }
  why = busy_reasons(result)
  return {**result, "busy": bool(why), "why": "; ".join(why) or None}


def busy_reasons(machine: Mapping) -> list[str]:
  """Why a section's machine state is too busy to decide on (empty: quiet)."""
  reasons = []
  others, steal = machine["others_cores"], machine["steal_percent"]
  if others is not None and others > BUSY_OTHERS_CORES:
    reasons.append(
      f"other processes used {others:.2f} of a core (> {BUSY_OTHERS_CORES:g})"
    )
  if steal is not None and steal > BUSY_STEAL_PERCENT:
    reasons.append(
      f"{steal:.1f}% of the CPU stolen (> {BUSY_STEAL_PERCENT:g}%)"
    )
  return reasons


def judge(body: Mapping, machine: Mapping) -> dict:
  """A section `body` with its `machine` state added; on a busy machine its
  targets are UNDECIDED and a note says why."""
  body = dict(body, machine=dict(machine))
  if not machine["busy"]:
    return body
  reason = f"machine busy: {machine['why']}"
  body["targets"] = [stats.undecided(t, reason) for t in body["targets"]]
  body["notes"] = [
    *body["notes"],
    f"Measured while the {reason}: its verdicts are UNDECIDED.",
  ]
  return body


def _busiest(before, after, session, seconds) -> list[dict]:
  """The other processes that used the most CPU between the snapshots (a
  process started in between counts with all its time)."""
  used = []
  for pid, (name, owner, cpu) in after.processes.items():
    if owner == session or pid == os.getpid():
      continue
    earlier = before.processes.get(pid)
    spent = cpu - (earlier[2] if earlier and earlier[0] == name else 0.0)
    if spent > 0:
      used.append({"pid": pid, "name": name, "cores": spent / seconds})
  used.sort(key=lambda p: p["cores"], reverse=True)
  return used[:_BUSIEST]


def _processes(proc: str) -> dict[int, tuple[str, int, float]]:
  found = {}
  for path in glob.glob(os.path.join(proc, "[0-9]*", "stat")):
    text = _read(path)
    if text:  # A process may end between the listing and the read.
      found[int(path.split(os.sep)[-2])] = parse_process_stat(text)
  return found


def _load(proc: str) -> float | None:
  text = _read(os.path.join(proc, "loadavg"))
  return float(text.split()[0]) if text else None


def _cpu_mhz(proc: str, sysfs: str) -> float | None:
  """The mean CPU frequency: sysfs's current one where the kernel has it,
  else /proc/cpuinfo's (a VM often shows its nominal one)."""
  pattern = "devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"
  paths = glob.glob(os.path.join(sysfs, pattern))
  khz = [float(t) for t in map(_read, paths) if t.strip()]
  if khz:
    return sum(khz) / len(khz) / 1000
  return parse_cpu_mhz(_read(os.path.join(proc, "cpuinfo")))


def _read(path: str) -> str:
  try:
    with open(path) as f:
      return f.read()
  except OSError:
    return ""
