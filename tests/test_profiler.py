"""ctl.telemetry.profiler: a trace of the loop calls that overlap --profile_steps."""

import glob
import os

import tensorflow as tf

from ctl.telemetry import profiler


def _traces(logdir):
  return glob.glob(
    os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")
  )


def test_only_the_loops_that_overlap_the_range_are_traced(tmp_path):
  logdir = str(tmp_path / "train")
  work = tf.function(lambda x: tf.reduce_sum(x * x))
  steps = profiler.StepProfiler(steps=(15, 25), logdir=logdir)
  traced = []
  for first in (1, 11, 21, 31):  # Loops of 10 steps: 1-10, 11-20, ...
    with steps.loop(first_step=first, last_step=first + 9):
      work(tf.ones([64]))
      traced.append(steps._running)  # pylint: disable=protected-access
  steps.stop()
  # 11-20 and 21-30 overlap steps 15-25; the trace stops after 21-30.
  assert traced == [False, True, True, False]
  assert len(_traces(logdir)) == 1


def test_no_range_or_no_logdir_traces_nothing(tmp_path):
  for kwargs in (
    dict(steps=None, logdir=str(tmp_path)),
    dict(steps=(1, 5), logdir=None),
  ):
    steps = profiler.StepProfiler(**kwargs)
    with steps.loop(first_step=1, last_step=10):
      pass
    steps.stop()
  assert not _traces(str(tmp_path))
