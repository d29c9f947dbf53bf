"""Straggler detection: which worker the others keep waiting for.

In synchronous training every worker's loop takes as long as the slowest
one's, so the wall time of a loop says nothing about who is slow. What
differs is the host time each worker spends outside the compiled loop (its
Python work between two loops: input of the next loop's arguments, logging,
callbacks, a busy or throttled host): the others wait for the slowest one in
the next all-reduce. Each worker passes its previous loop's host seconds into
the loop's one all-reduce (`ctl.train.loop.TrainLoop.train`), so every worker learns
everyone's at no extra collective; the chief feeds them to a `Detector`.

The rule: over the last `loops` loops (default 5), each worker's typical
host time is its median; a worker straggles when its median is the largest, at
least `ratio` (1.5) times the median of all workers' medians and at least
`min_excess_secs` (10 ms) above it; the floor keeps microsecond noise between
idle hosts from counting. Medians over a window, not a streak of loops: one
busy loop on another worker (a log line, a summary, a neighbour on a shared
host) neither ends a straggler nor names a new one, and a straggler that
recovers stops being named once it is no longer slow in most of the window.
"""

import collections
import dataclasses

from absl import logging
import numpy as np


@dataclasses.dataclass(frozen=True)
class Straggler:
  """The worker the others wait for.

  Attributes:
    worker: its index in the cluster (the chief is 0).
    ratio: its median host seconds over the median of all workers', over
      the last loops.
    seconds: its median host seconds over the last loops.
    median_seconds: the median of all workers' medians.
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
    self._ratio = ratio
    self._min_excess_secs = min_excess_secs
    self._window = collections.deque(maxlen=loops)  # Host seconds by loop.

  def add(self, host_seconds: np.ndarray) -> Straggler | None:
    """Adds one loop's host seconds per worker; the straggler, if any.

    Args:
      host_seconds: every worker's host seconds of one loop, by index.

    Returns:
      The straggler when the rule holds after this loop, else None.
    """
    seconds = np.asarray(host_seconds, dtype=np.float64)
    if self._window and self._window[-1].shape != seconds.shape:
      self._window.clear()  # Another cluster: its own window.
    self._window.append(seconds)
    if seconds.size < 2 or len(self._window) < self._window.maxlen:
      return None
    typical = np.median(np.stack(self._window), axis=0)
    worker = int(np.argmax(typical))
    slowest, median = float(typical[worker]), float(np.median(typical))
    if (
      slowest - median < self._min_excess_secs or slowest < self._ratio * median
    ):
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
