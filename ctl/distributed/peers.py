"""Waiting for the cluster's other workers, in Python, before TensorFlow does.

Building MultiWorkerMirroredStrategy blocks in a TensorFlow C++ call until
every task of TF_CONFIG has registered, holding the GIL and with a C++
SIGTERM handler that only records the signal: a peer that never starts left
a worker silent and deaf to SIGTERM and SIGINT. So each worker first waits
here, where signals act at once: it listens on its own TF_CONFIG port (a
beacon the others can see, closed before TensorFlow binds the port) and
probes every other task's address until each has answered once, saying
every so often whom it still waits for, and giving up after a limit.
"""

from collections.abc import Callable
import socket
import time

from absl import logging

from ctl.distributed import cluster as cluster_lib
from ctl.errors import Stalled

_FLAG = "--startup_timeout_secs"
# How long a worker waits for the others by default; the stall watchdog's
# start-up limit is the same (ctl.resilience.watchdog.Limits).
STARTUP_TIMEOUT_SECS = 900.0


def wait_for_peers(
  info: cluster_lib.ClusterInfo,
  *,
  timeout_secs: float,
  report_every_secs: float = 10.0,
  poll_secs: float = 0.2,
  log: Callable[..., None] = logging.warning,
) -> None:
  """Returns once every other training task accepts connections.

  Args:
    info: this process's role; nothing is awaited unless it is multi-worker.
    timeout_secs: how long to wait in all.
    report_every_secs: how often to say whom it still waits for.
    poll_secs: pause between rounds of probes.
    log: where those lines go (`fn(format, *args)`).

  Raises:
    Stalled: a peer did not answer within `timeout_secs`.
  """
  if not info.is_multi_worker:
    return
  tasks = [("chief", i, a) for i, a in enumerate(info.chief)]
  tasks += [("worker", i, a) for i, a in enumerate(info.workers)]
  mine = [
    a for job, i, a in tasks if (job, i) == (info.task_type, info.task_index)
  ]
  waiting = {f"{job} {i} ({a})": a for job, i, a in tasks if a not in mine}
  beacon = _listen(mine[0]) if mine else None
  if beacon is None:  # The port is taken: TensorFlow will say so at once.
    return
  started = time.monotonic()
  next_report = started + report_every_secs
  try:
    while True:
      waiting = {name: a for name, a in waiting.items() if not _answers(a)}
      if not waiting:
        return
      now = time.monotonic()
      if now - started >= timeout_secs:
        raise Stalled(
          f"gave up after {timeout_secs:g} s ({_FLAG}) waiting for "
          f"{', '.join(waiting)} of TF_CONFIG to start; start it or fix "
          "TF_CONFIG, then run again."
        )
      if now >= next_report:
        log(
          "Waiting %.0f s so far for %s to start (limit %g s, %s).",
          now - started,
          ", ".join(waiting),
          timeout_secs,
          _FLAG,
        )
        next_report += report_every_secs
      time.sleep(poll_secs)
  finally:
    beacon.close()


def _split(address: str) -> tuple[str, int]:
  host, _, port = address.rpartition(":")
  return host.strip("[]"), int(port)


def _answers(address: str) -> bool:
  try:
    socket.create_connection(_split(address), timeout=1.0).close()
    return True
  except OSError:
    return False


def _listen(address: str) -> socket.socket | None:
  """Listens on this task's port (IPv6 and IPv4), or returns None."""
  port = _split(address)[1]
  for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "")):
    beacon = socket.socket(family)
    try:
      beacon.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      if family == socket.AF_INET6:
        beacon.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
      beacon.bind((host, port))
      beacon.listen(64)
      return beacon
    except OSError:
      beacon.close()
  return None
