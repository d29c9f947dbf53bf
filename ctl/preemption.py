"""Stop requests: SIGTERM (preemption, maintenance, `docker stop`) -> a flag.

The handler only records the request; the train loop reads the flag at its
next boundary and all workers agree on it through one all-reduce (see
`TrainLoop.train`), so every worker saves at the same step and exits with
`PREEMPTED_EXIT_CODE`. A non-zero code tells the platform (Vertex AI, the
local launcher, Kubernetes) that the job is not done and must be restarted.
"""

import signal
import threading

# 128 + SIGTERM, the conventional status of a process stopped by SIGTERM.
# ctl exits with it only after the checkpoint at the agreed step is written.
PREEMPTED_EXIT_CODE = 143


class StopRequest:
  """Records SIGTERM (and any other listed signals) instead of dying."""

  def __init__(self, signals=(signal.SIGTERM,)):
    self._event = threading.Event()
    self._signals = signals
    self._previous = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in self._signals:
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc_info):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous.clear()

  def _handle(self, signum, frame):
    del frame  # Unused.
    self._event.set()

  @property
  def requested(self) -> bool:
    return self._event.is_set()


class Preempted(Exception):
  """Training stopped on request after saving at the agreed step."""

  def __init__(self, step: int):
    super().__init__(f"Stopped on request after saving the checkpoint at "
                     f"step {step}; run the same command again to continue.")
    self.step = step
