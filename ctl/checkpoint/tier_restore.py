"""Restore from the nearest tier, every worker at one step.

After a restart each worker says which complete steps its local tier holds
(ctl.checkpoint.local_tier) and which step the bucket's newest checkpoint is, in one
exchange (`gather`, an all-reduce: ctl.distributed.worker_exchange). The candidates are
every step any worker holds locally and the bucket's newest, newest first.
For each candidate every worker gets it from the nearest place that has it:
its own tier, a peer's tier (over the peer's node agent's file service,
ctl.launch.tier_service), or the bucket, and restores it; a second exchange says
whether every worker did, and if one could not (a peer that is gone, a file
that does not read), all try the next candidate. So every worker restores
the same step, the newest that all of them can get.

A peer that does not answer (its node agent frozen, its machine gone) costs
one `PEER_SILENCE_SECS`: a limit on silence, not on the whole copy, so a slow
but steady copy goes on; and it is not asked again in that restore (was: 60 s
for each step it listed, then the bucket's step anyway).
"""

import dataclasses
import http.client
import json
import os
import shutil
import time
import urllib.error
import urllib.request

from absl import logging
import numpy as np

from ctl.checkpoint import local_tier

# Seconds a peer's file service may send nothing (connecting, or mid-file)
# before it is given up: a socket timeout, each read waits this long at most.
PEER_SILENCE_SECS = 5.0
# A worker's row: its two newest local steps, its service port, the bucket's
# newest step; steps are sent as step + 1 (0: none).
TIERS = ("local", "peer", "bucket")


@dataclasses.dataclass(frozen=True)
class Restored:
  """What a tiered restore restored.

  Attributes:
    path: the checkpoint prefix restored.
    step: its step.
    tier: where it came from: "local", "peer" or "bucket".
    seconds: how long the agreement, fetch and restore took.
    tiers: where each worker's came from, by rank.
  """

  path: str
  step: int
  tier: str
  seconds: float
  tiers: tuple[str, ...] = ()


def restore_agreed(
  *,
  tier: local_tier.LocalTier | None,
  bucket_dir: str,
  hosts: list[str],
  service_port: int,
  gather,
  restore,
) -> Restored | None:
  """Restores the newest step every worker can get (module docstring).

  Args:
    tier: this worker's local tier (None: it has none, yet takes part).
    bucket_dir: the checkpoint directory (read by every worker).
    hosts: every worker's host, by rank (where its file service listens).
    service_port: the port of this node's file service, 0 when none.
    gather: `gather(row) -> table`, every worker's row (all call it).
    restore: `restore(prefix) -> bool`, False when it cannot be read.

  Returns:
    What was restored; None when no worker and no bucket checkpoint holds a
    step all workers could restore (the caller falls back to the bucket's
    own search, which every worker makes alike).
  """
  started = time.monotonic()
  own = tier.steps()[-2:] if tier else []
  bucket = local_tier.newest_in_bucket(bucket_dir)
  row = [s + 1 for s in reversed(own)] + [0] * (2 - len(own))
  table = gather([*row, service_port, -1 if bucket is None else bucket + 1])
  silent = set()  # Peers that did not answer: not asked again.
  for step in _candidates(table):
    where, path = _obtain(
      step,
      tier=tier,
      bucket_dir=bucket_dir,
      table=table,
      hosts=hosts,
      own=own,
      silent=silent,
    )
    done = path is not None and restore(path)
    code = TIERS.index(where) if done else -1
    outcomes = gather([code])[:, 0]
    if np.all(outcomes >= 0):
      seconds = time.monotonic() - started
      logging.info(
        "Restored step %d from the %s tier (%s) in %.2f s.",
        step,
        where,
        path,
        seconds,
      )
      tiers = tuple(TIERS[int(c)] for c in outcomes)
      return Restored(path, step, where, seconds, tiers)
    logging.warning(
      "Step %d could not be restored by every worker; trying an older one.",
      step,
    )
  return None


def _candidates(table: np.ndarray) -> list[int]:
  """Every step a worker holds locally or the bucket holds, newest first."""
  local = table[:, :2].ravel()
  bucket = table[:, 3]
  steps = {int(s) - 1 for s in np.concatenate([local, bucket]) if s > 0}
  return sorted(steps, reverse=True)


def _obtain(step, *, tier, bucket_dir, table, hosts, own, silent):
  """(tier name, prefix) of `step` from the nearest place that has it;
  (None, None) when none does. Peers in `silent` are not asked."""
  if step in own:
    return "local", tier.prefix(step)
  for rank, row in enumerate(table):
    if tier and step + 1 in row[:2] and row[2] > 0 and rank < len(hosts):
      address = f"{hosts[rank]}:{int(row[2])}"
      if address in silent:
        continue
      if fetch_from_peer(tier, step, address=address, silent=silent):
        return "peer", tier.prefix(step)
  prefix = os.path.join(bucket_dir, f"ckpt-{step}")
  if step + 1 in table[:, 3]:
    return "bucket", prefix
  return None, None


def fetch_from_peer(
  tier: local_tier.LocalTier,
  step: int,
  *,
  address: str,
  silent: set[str] | None = None,
):
  """Copies committed `step` from a peer's file service into `tier`.

  Args:
    tier: this worker's tier.
    step: the step to copy.
    address: the peer's service, "host:port".
    silent: the peers that did not answer; `address` is added to it when it
      does not answer now (silent `PEER_SILENCE_SECS`, refused, reset).

  Returns:
    Whether the step is now committed in `tier` (False: said why).
  """
  base = f"http://{address}/"
  try:
    with _open(base + local_tier.STATE_FILE) as response:
      state = json.load(response)
    (files,) = [e["files"] for e in state["steps"] if e["step"] == step]
    for name, size in files.items():
      if os.path.basename(name) != name:
        raise ValueError(f"a file name with a directory: {name!r}")
      temporary = os.path.join(tier.directory, f".fetch-{name}")
      with _open(base + name) as response, open(temporary, "wb") as f:
        shutil.copyfileobj(response, f, 1 << 20)
      if os.path.getsize(temporary) != size:
        raise ValueError(
          f"{name}: {os.path.getsize(temporary)} of {size} bytes"
        )
      os.replace(temporary, os.path.join(tier.directory, name))
  except (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    http.client.HTTPException,
  ) as e:
    unanswered = _did_not_answer(e)
    if unanswered and silent is not None:
      silent.add(address)
    logging.warning(
      "Could not fetch the checkpoint of step %d from the peer at %s (%s)%s.",
      step,
      address,
      e,
      "; it is not asked again in this restore" if unanswered else "",
    )
    return False
  tier.adopt(step)
  return True


def _did_not_answer(error: Exception) -> bool:
  """Whether a fetch failed for want of an answer (silence, refused, reset),
  not for what the peer answered (404, a short file, a bad state file)."""
  if isinstance(error, urllib.error.HTTPError):
    return False
  if isinstance(error, urllib.error.URLError):
    error = error.reason
  return isinstance(error, (TimeoutError, ConnectionError))


def _open(url: str):
  return urllib.request.urlopen(url, timeout=PEER_SILENCE_SECS)
