"""Straggler detection: which worker the others keep waiting for.

In synchronous training every worker's loop takes as long as the slowest
one's, so the wall time of a loop says nothing about who is slow. What
differs is the host time each worker spends outside the compiled loop (its
Python work between two loops: input of the next loop's arguments, logging,
callbacks, a busy or throttled host): the others wait for the slowest one in
the next all-reduce. Each worker passes its previous loop's host seconds into
the loop's one all-reduce (`ctl.train.loop.TrainLoop.train`), so every worker learns
everyone's at no extra collective; the chief feeds them to a `Detector`.

The rule: a worker straggles when it has the largest host time in each of the
last `loops` loops (default 5), at least `ratio` (1.5) times the median of all
workers' and at least `min_excess_secs` (10 ms) above it; the floor keeps
microsecond noise between idle hosts from counting. It stops straggling at the
first loop that breaks the rule.
"""

import dataclasses

from absl import logging
import numpy as np


@dataclasses.dataclass(frozen=True)
class Straggler:
  """The worker the others wait for.

  Attributes:
    worker: its index in the cluster (the chief is 0).
    ratio: its host seconds over the median of all workers', in the latest
      loop.
    seconds: its host seconds in the latest loop.
    median_seconds: the median of all workers' host seconds in that loop.
  """

  worker: int
  ratio: float
  seconds: float
  median_seconds: float


class Detector:
  """Applies the straggler rule (module docstring) to one loop at a time."""

  def __init__(
    self, *, loops: int = 5, ratio: float = 1.5, min_excess_secs: float = 0.01
  ):
    self._loops = loops
    self._ratio = ratio
    self._min_excess_secs = min_excess_secs
    self._worker = None  # The slowest worker of the current streak.
    self._streak = 0

  def add(self, host_seconds: np.ndarray) -> Straggler | None:
    """Adds one loop's host seconds per worker; the straggler, if any.

    Args:
      host_seconds: every worker's host seconds of one loop, by index.

    Returns:
      The straggler when the rule holds after this loop, else None.
    """
    seconds = np.asarray(host_seconds, dtype=np.float64)
    if seconds.size < 2:
      return None
    worker = int(np.argmax(seconds))
    slowest, median = float(seconds[worker]), float(np.median(seconds))
    if (
      slowest - median < self._min_excess_secs or slowest < self._ratio * median
    ):
      self._worker, self._streak = None, 0
      return None
    if worker != self._worker:
      self._worker, self._streak = worker, 0
    self._streak += 1
    if self._streak < self._loops:
      return None
    return Straggler(
      worker=worker,
      ratio=slowest / max(median, 1e-9),
      seconds=slowest,
      median_seconds=median,
    )


class Watch:
  """The chief's view: a `Detector` that says when a straggler comes or goes.

  Logs one warning when a worker starts straggling and one line when it stops,
  and gives the current straggler's scalars for the train summaries.
  """

  def __init__(self, detector: Detector | None = None, *, enabled=True):
    """Initializes the watch.

    Args:
      detector: the rule (default: `Detector()`).
      enabled: False on the other workers: `add` does nothing, so the
        controller calls it everywhere.
    """
    self._detector = detector or Detector()
    self._enabled = enabled
    self.straggler = None

  def add(self, host_seconds: np.ndarray, *, step: int) -> None:
    """Adds the loop that ended at `step`; logs a change of straggler."""
    if not self._enabled:
      return
    before, straggler = self.straggler, self._detector.add(host_seconds)
    self.straggler = straggler
    if straggler and (not before or before.worker != straggler.worker):
      logging.warning(
        "straggler: worker %d is the slowest at step %d: %.3f s of host "
        "time per loop, %.1fx the median %.3f s (seconds by worker: %s); "
        "the others wait for it in every all-reduce.",
        straggler.worker,
        step,
        straggler.seconds,
        straggler.ratio,
        straggler.median_seconds,
        " ".join(f"{s:.3f}" for s in host_seconds),
      )
    elif before and not straggler:
      logging.info(
        "straggler: worker %d no longer straggles at step %d.",
        before.worker,
        step,
      )

  def scalars(self) -> dict[str, float]:
    """`straggler/ratio` and `straggler/worker` while one straggles."""
    if not self.straggler:
      return {}
    return {
      "straggler/ratio": self.straggler.ratio,
      "straggler/worker": self.straggler.worker,
    }
