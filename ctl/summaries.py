"""TensorBoard scalars, written by the chief only.

Other workers get a no-op writer so they never put event files in the run
directory (which would show up as duplicate runs in TensorBoard).
"""

import tensorflow as tf


class ScalarWriter:
  """Writes `{tag: value}` scalars at a step; a no-op without a logdir.

  The event file is created at the first write, so a run that fails before
  it has anything to log (a bad flag, a checkpoint of another model) leaves
  the TensorBoard directory as it was.
  """

  def __init__(self, *, logdir: str | None):
    """Writes event files into `logdir`; pass None on non-chief workers."""
    self._logdir = logdir
    self._writer = None if logdir else tf.summary.create_noop_writer()

  def write(self, step: int, scalars: dict[str, float]) -> None:
    """Writes the scalars and flushes, so readers see them at once."""
    if self._writer is None:
      self._writer = tf.summary.create_file_writer(self._logdir)
    with self._writer.as_default(step=step):
      for tag, value in scalars.items():
        tf.summary.scalar(tag, value)
    self._writer.flush()

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
