"""TensorBoard summaries, written by the chief only, one run dir per role.

The layout is the one Keras' `TensorBoard` callback and Model Garden use, so
TensorBoard draws train and validation curves of a tag in one chart:

  <logdir>/train/        loss, each of the task's metrics by name,
                         learning_rate, examples_per_second, steps_per_second
                         (and the profiler's plugins/profile)
  <logdir>/validation/   loss, each metric by name
  <logdir>/              the run's hyperparameters (HParams dashboard); the
                         directory is the HParams "session", its metrics are
                         the last values of the tags in train/ and validation/

Other workers get no logdir, so they never put event files in the run
directories (which would show up as duplicate runs in TensorBoard).

Summaries are observations, not results: when the storage refuses a write
(a full disk, a quota, a lost permission), the writer says so once, in one
warning line, and writes nothing more; training goes on, and checkpoints and
the export are not affected (on the same full disk, the next checkpoint save
stops the run with exit 74, as it would without summaries).
"""

from collections.abc import Iterator, Mapping, Sequence
import contextlib
import posixpath

from absl import logging
from tensorboard.plugins.hparams import api as hp
import tensorflow as tf

from ctl import errors
from ctl.io import fencing

TRAIN = "train"
VALIDATION = "validation"


def hparams_metrics(metric_names: Sequence[str]) -> list[tuple[str, str]]:
  """The columns of the HParams dashboard, (run, tag) of final values: each
  of the task's metrics, then the loss, validation first."""
  return [
    (run, tag) for run in (VALIDATION, TRAIN) for tag in (*metric_names, "loss")
  ]


HParamValue = bool | int | float | str


class ScalarWriter:
  """Writes `{tag: value}` scalars into named run dirs; a no-op without logdir.

  An event file is created at the first write into its run dir, so a run that
  fails before it has anything to log (a bad flag, a checkpoint of another
  model) leaves the TensorBoard directory as it was.
  """

  def __init__(
    self, *, logdir: str | None, fence: fencing.Fence = fencing.OPEN
  ):
    """Writes event files under `logdir`; pass None on non-chief workers.

    `fence` (ctl.io.fencing) is checked before each write: a trainer that lost
    the lease adds nothing to the run's curves.
    """
    self._logdir = logdir
    self._fence = fence
    self._writers = {}

  def run_dir(self, run: str) -> str | None:
    """Where run `run` ("" for the logdir itself) writes; None if nowhere."""
    if not self._logdir:
      return None
    return posixpath.join(self._logdir, run) if run else self._logdir

  def write(
    self, step: int, scalars: Mapping[str, float], *, run: str = TRAIN
  ) -> None:
    """Writes the scalars into run `run` and flushes, so readers see them.

    Raises:
      LeaseLost: another trainer took the lease; nothing written.
    """
    if self._logdir:
      self._fence.check("TensorBoard summaries")
    with self._refusals():
      with self._writer(run).as_default(step=step):
        for tag, value in scalars.items():
          tf.summary.scalar(tag, value)
      self._writers[run].flush()

  def write_hparams(
    self,
    hparams: Mapping[str, HParamValue],
    metric_names: Sequence[str] = (),
  ) -> None:
    """Records the hyperparameters of this run for the HParams dashboard.

    Written into the logdir itself (the HParams session); the dashboard's
    metric columns are `hparams_metrics(metric_names)`, read from the train
    and validation runs below it, so runs whose logdirs share a parent line
    up as trials.

    Args:
      hparams: {name: value}, e.g. {"learning_rate": 1e-3, "model": "cnn"};
        nothing is written when it is empty.
      metric_names: the task's metrics (the loss is always a column).
    """
    if not hparams:
      return
    with self._refusals(), self._writer("").as_default(step=0):
      hp.hparams_config(
        hparams=[hp.HParam(name) for name in hparams],
        metrics=[
          hp.Metric(tag, group=run, display_name=f"{run} {tag}")
          for run, tag in hparams_metrics(metric_names)
        ],
      )
      hp.hparams(dict(hparams))
      self._writers[""].flush()

  def _writer(self, run: str):
    if run not in self._writers:
      self._writers[run] = (
        tf.summary.create_file_writer(self.run_dir(run))
        if self._logdir
        else tf.summary.create_noop_writer()
      )
    return self._writers[run]

  @contextlib.contextmanager
  def _refusals(self) -> Iterator[None]:
    """Turns a write the storage refuses into one warning and no more writes.

    Raises:
      tf.errors.OpError: any other TensorFlow error.
    """
    try:
      yield
    except tf.errors.OpError as e:
      reason = errors.refused_write(e)
      if reason is None:
        raise
      logging.warning(
        "Cannot write the TensorBoard summaries in %s: %s; training goes on "
        "without them (checkpoints and the export are not affected).",
        self._logdir,
        reason,
      )
      self._logdir = None
      self.close()
      self._writers = {}

  def close(self) -> None:
    for writer in self._writers.values():
      try:
        writer.close()
      except tf.errors.OpError as e:
        if errors.refused_write(e) is None:
          raise
