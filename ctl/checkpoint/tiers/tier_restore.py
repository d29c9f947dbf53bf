"""Restore from the nearest tier, every worker at one step.

Every tier answers the same two questions (`Tier`): which complete steps it
holds, and `get(step)`, a checkpoint prefix this worker can restore that
step from (a local tier's own file, a peer's fetched into it, the bucket's).

After a restart each worker says what it can offer (`Offer`: the newest
complete steps of its local tier, its node's file service, the bucket's
newest step as it found it) in one exchange (`gather`, an all-reduce:
ctl.distributed.worker_exchange). The candidates are every step any worker
holds locally and the bucket's newest, newest first. For each candidate
every worker gets it from the nearest tier that holds it: its own local
tier, a peer's (ctl.checkpoint.tiers.peer_tier), or the bucket
(ctl.checkpoint.tiers.bucket_tier), and restores it; a second exchange says
whether every worker did, and if one could not (a peer that is gone, a file
that does not read), all try the next candidate. So every worker restores
the same step, the newest that all of them can get.
"""

import dataclasses
import time
from typing import Protocol

from absl import logging
import numpy as np

from ctl.checkpoint.tiers import bucket_tier
from ctl.checkpoint.tiers import local_tier
from ctl.checkpoint.tiers import peer_tier

# The tiers by name, nearest first; a worker's outcome is its tier's index.
TIERS = (
  local_tier.LocalTier.name,
  peer_tier.PeerTier.name,
  bucket_tier.BucketTier.name,
)
_OFFERED_STEPS = 2  # A worker offers its newest two local steps.


class Tier(Protocol):
  """What a restore asks every tier (module docstring)."""

  name: str

  def steps(self) -> list[int]:
    """The complete steps it holds."""

  def get(self, step: int) -> str | None:
    """A prefix to restore `step` from; None when it cannot be had."""


@dataclasses.dataclass(frozen=True)
class Offer:
  """What one worker can give a restore: its row of the exchange.

  Attributes:
    local_steps: its local tier's newest complete steps, newest first.
    service_port: its node's file service (peer_tier), 0 when none.
    bucket_step: the bucket's newest step as this worker found it.
  """

  local_steps: tuple[int, ...] = ()
  service_port: int = 0
  bucket_step: int | None = None

  def row(self) -> list[int]:
    """The offer as numbers: steps as step + 1, 0 for none."""
    steps = [s + 1 for s in self.local_steps[:_OFFERED_STEPS]]
    steps += [0] * (_OFFERED_STEPS - len(steps))
    bucket = 0 if self.bucket_step is None else self.bucket_step + 1
    return [*steps, self.service_port, bucket]

  @classmethod
  def from_row(cls, row) -> "Offer":
    """The offer a `row()` came from."""
    steps = tuple(int(s) - 1 for s in row[:_OFFERED_STEPS] if s > 0)
    port, bucket = int(row[_OFFERED_STEPS]), int(row[_OFFERED_STEPS + 1])
    return cls(steps, port, bucket - 1 if bucket > 0 else None)


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
  own = Offer(
    tuple(reversed(tier.steps()[-_OFFERED_STEPS:])) if tier else (),
    service_port,
    bucket_tier.newest_in_bucket(bucket_dir),
  )
  offers = [Offer.from_row(row) for row in gather(own.row())]
  tiers = _nearest_first(tier, offers, hosts=hosts, bucket_dir=bucket_dir)
  for step in _candidates(offers):
    where, path = _get(step, tiers)
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
      by_rank = tuple(TIERS[int(c)] for c in outcomes)
      return Restored(path, step, where, seconds, by_rank)
    logging.warning(
      "Step %d could not be restored by every worker; trying an older one.",
      step,
    )
  return None


def _nearest_first(tier, offers, *, hosts, bucket_dir) -> list[Tier]:
  """The tiers this worker can get a step from, nearest first: its own, its
  peers' (only with a tier of its own to fetch into), the bucket's."""
  nearest: list[Tier] = [tier] if tier else []
  silent: set[str] = set()  # Peers that did not answer: not asked again.
  for rank, offer in enumerate(offers):
    if tier and offer.service_port and rank < len(hosts):
      address = f"{hosts[rank]}:{offer.service_port}"
      nearest.append(
        peer_tier.PeerTier(tier, address, offer.local_steps, silent)
      )
  in_bucket = {o.bucket_step for o in offers if o.bucket_step is not None}
  nearest.append(bucket_tier.BucketTier(bucket_dir, sorted(in_bucket)))
  return nearest


def _candidates(offers: list[Offer]) -> list[int]:
  """Every step a worker holds locally or the bucket holds, newest first."""
  steps = {s for o in offers for s in o.local_steps}
  steps |= {o.bucket_step for o in offers if o.bucket_step is not None}
  return sorted(steps, reverse=True)


def _get(step: int, tiers: list[Tier]) -> tuple[str | None, str | None]:
  """(tier name, prefix) of `step` from the nearest tier that gives it;
  (None, None) when none does."""
  for tier in tiers:
    if step in tier.steps():
      path = tier.get(step)
      if path is not None:
        return tier.name, path
  return None, None
