"""A TensorFlow profiler trace of a range of training steps.

The trace goes where TensorBoard's profile plugin looks for it, under the
train run: `<logdir>/train/plugins/profile/<time>/<host>.xplane.pb`.

Steps run `steps_per_loop` at a time inside one `tf.function` call, so the
host can only start and stop the profiler between calls: the trace covers
every loop call that overlaps the range, and a step inside a call is
profiled as part of that call (in the trace, one "train" step per call).
"""

import contextlib

from absl import logging
import tensorflow as tf


class StepProfiler:
  """Profiles the loop calls that overlap steps [first, last] (inclusive)."""

  def __init__(self, *, steps: tuple[int, int] | None, logdir: str | None):
    """Initializes the profiler.

    Args:
      steps: (first, last) global steps to profile, or None for no trace.
      logdir: where the trace goes (the train run dir); None profiles nothing
        (non-chief workers).
    """
    self._steps = steps if logdir else None
    self._logdir = logdir
    self._running = False

  @contextlib.contextmanager
  def loop(self, *, first_step: int, last_step: int):
    """Profiles the loop call that runs steps first_step..last_step if due."""
    if self._steps is None or not (
      first_step <= self._steps[1] and last_step >= self._steps[0]
    ):
      yield
      return
    if not self._running:
      logging.info(
        "Profiling steps %d-%d into %s.",
        first_step,
        self._steps[1],
        self._logdir,
      )
      tf.profiler.experimental.start(self._logdir)
      self._running = True
    with tf.profiler.experimental.Trace("train", step_num=last_step, _r=1):
      yield
    if last_step >= self._steps[1]:
      self.stop()

  def stop(self) -> None:
    """Stops a running trace and writes it; does nothing otherwise."""
    if self._running:
      self._running = False
      tf.profiler.experimental.stop()
      logging.info("Profile written to %s/plugins/profile.", self._logdir)
