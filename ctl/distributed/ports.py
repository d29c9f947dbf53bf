"""Free ports for a local cluster's workers and an emulator, that stay free.

A port that nothing listens on just now is not enough. The kernel hands ports
of its ephemeral range to outgoing connections, and a concurrent run's worker
connecting to its peer may take one between its choice and the bind, and hold
it for minutes: the worker told to listen there then fails on every restart
("Could not start gRPC server"). So the ports come from below that range,
where only a bind takes them, and each is claimed on this machine for a while
(a file in the temporary directory), so that two callers, even in different
processes, are not handed the same one before either binds it.
"""

from collections.abc import Sequence
import os
import random
import socket
import tempfile
import time

# Where the ports come from: below Linux's ephemeral range (32768 on), above
# most services' well-known and registered ports.
CANDIDATES = (15000, 32768)
# How long a port handed out stays claimed: time for a worker to start and
# bind it, with margin.
CLAIM_SECS = 300.0
_EPHEMERAL_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_IANA_EPHEMERAL = (49152, 65535)


def ephemeral_range() -> tuple[int, int]:
  """The ports (first, last) the kernel gives outgoing connections: Linux's
  setting where there is one, otherwise IANA's range."""
  try:
    with open(_EPHEMERAL_FILE) as f:
      low, high = map(int, f.read().split())
  except (OSError, ValueError):
    return _IANA_EPHEMERAL
  return low, high


def free_ports(
  count: int,
  *,
  candidates: Sequence[int] | None = None,
  claims: str | None = None,
) -> list[int]:
  """Returns `count` distinct ports nothing is bound to, claimed for this
  caller; bind them within `CLAIM_SECS`.

  Args:
    count: How many.
    candidates: The ports to choose from; by default `CANDIDATES` less the
      ephemeral range (all of `CANDIDATES` where that leaves none).
    claims: The directory of claims; by default this user's in the
      temporary directory, which all their processes on the machine share
      (none where it cannot be made: the choice is then random alone).

  Raises:
    OSError: Fewer than `count` candidates are free and unclaimed.
  """
  if candidates is None:
    low, high = ephemeral_range()
    candidates = [p for p in range(*CANDIDATES) if not low <= p <= high]
    candidates = candidates or range(*CANDIDATES)
  claims = claims or os.path.join(
    tempfile.gettempdir(), f"ctl-ports-{os.getuid()}"
  )
  try:
    os.makedirs(claims, exist_ok=True)
  except OSError:  # A read-only temporary directory: unclaimed choices.
    claims = None
  chosen = []
  for port in random.sample(list(candidates), len(candidates)):
    if _is_free(port) and (
      claims is None or _claim(os.path.join(claims, str(port)))
    ):
      chosen.append(port)
      if len(chosen) == count:
        return chosen
  raise OSError(f"Fewer than {count} free ports among {len(candidates)}.")


def _is_free(port: int) -> bool:
  """Whether a listening socket could be bound to `port` on every address."""
  with socket.socket() as s:
    try:
      s.bind(("0.0.0.0", port))
    except OSError:
      return False
  return True


def _claim(path: str) -> bool:
  """Claims the port named by `path`, unless another caller claimed it less
  than `CLAIM_SECS` ago."""
  try:
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    return True
  except FileExistsError:
    try:
      if time.time() - os.stat(path).st_mtime < CLAIM_SECS:
        return False
      os.utime(path)
    except FileNotFoundError:
      return False
    return True
