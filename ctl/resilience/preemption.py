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
  """Records SIGTERM and SIGINT (or the listed signals) instead of dying.

  Python runs signal handlers only between bytecodes, so not while the main
  thread is inside a long compiled train loop. A second SIGINT must act at
  once even then: signals are also written to a wakeup pipe (by the
  interpreter's C handler, the moment they arrive) that a watcher thread
  reads, and the watcher ends the process on the second SIGINT.
  """

  def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
    self._event = threading.Event()
    self._signals = signals
    self._previous = {}
    self._previous_wakeup_fd = None
    self._pipe = None
    self.signal = None  # The first signal received.

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in self._signals:
        self._previous[sig] = signal.signal(sig, self._handle)
      if signal.SIGINT in self._signals:
        self._pipe = os.pipe()
        os.set_blocking(self._pipe[1], False)
        self._previous_wakeup_fd = signal.set_wakeup_fd(
          self._pipe[1], warn_on_full_buffer=False
        )
        threading.Thread(
          target=_exit_on_second_sigint, args=(self._pipe[0],), daemon=True
        ).start()
    return self

  def __exit__(self, *exc_info):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous.clear()
    if self._pipe:
      signal.set_wakeup_fd(self._previous_wakeup_fd)
      os.close(self._pipe[1])  # The watcher reads EOF, closes its end, ends.
      self._pipe = None

  def _handle(self, signum, frame):
    del frame  # Unused.
    if self.signal is None:
      self.signal = signum
    self._event.set()

  @property
  def requested(self) -> bool:
    return self._event.is_set()


def _exit_on_second_sigint(read_fd: int) -> None:
  """Reads signal numbers from the wakeup pipe; exits 130 on a second SIGINT."""
  interrupts = 0
  with os.fdopen(read_fd, "rb", buffering=0) as pipe:
    while data := pipe.read(64):
      interrupts += data.count(signal.SIGINT)
      if interrupts >= 2:
        os.write(2, b"error: interrupted twice; exiting without saving.\n")
        os._exit(128 + signal.SIGINT)  # pylint: disable=protected-access
