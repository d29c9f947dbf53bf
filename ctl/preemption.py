"""Stop requests: SIGTERM (preemption, maintenance, `docker stop`) -> a flag.

The handler only records the request; the train loop reads the flag at its
next boundary and all workers agree on it through one all-reduce (see
`TrainLoop.train`), so every worker saves at the same step, `controller.run`
raises `errors.Preempted`, and the process exits with
`errors.PREEMPTED_EXIT_CODE`. A non-zero code tells the platform (Vertex AI,
the local launcher, Kubernetes) that the job is not done and must be
restarted.
"""

import signal
import threading


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
