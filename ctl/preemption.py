"""Stop requests: SIGTERM (preemption, maintenance, `docker stop`) and SIGINT
(Ctrl-C) -> a flag.

The handler only records the request; the train loop reads the flag at its
next boundary and all workers agree on it through one all-reduce (see
`TrainLoop.train`), so every worker saves at the same step, `controller.run`
raises `errors.Preempted`, and the process exits with 128 + the signal's
number (`errors.PREEMPTED_EXIT_CODE` for SIGTERM, 130 for SIGINT). A non-zero
code tells the platform (Vertex AI, the local launcher, Kubernetes) that the
job is not done and must be restarted. A second SIGINT does not wait for the
save: the process dies of it at once, as without us.
"""

import os
import signal
import threading


class StopRequest:
  """Records SIGTERM and SIGINT (or the listed signals) instead of dying."""

  def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
    self._event = threading.Event()
    self._signals = signals
    self._previous = {}
    self.signal = None  # The first signal received.

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
    if signum == signal.SIGINT and self._event.is_set():
      # Ctrl-C again: the user does not want to wait for the save.
      signal.signal(signal.SIGINT, signal.SIG_DFL)
      os.kill(os.getpid(), signal.SIGINT)
    if self.signal is None:
      self.signal = signum
    self._event.set()

  @property
  def requested(self) -> bool:
    return self._event.is_set()
