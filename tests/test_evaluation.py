"""Tests for ctl.train.evaluation: when a run evaluates, and where metrics go."""

import keras
import numpy as np
import tensorflow as tf

from ctl.telemetry import progress as progress_lib
from ctl.telemetry import summaries
from ctl.testing.run_files import read_scalars
from ctl.train import evaluation
from ctl.train import loop as loop_lib


def _evaluation(tmp_path, *, writes=True, data=True, every_steps=10):
  strategy = tf.distribute.get_strategy()
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  rng = np.random.default_rng(0)
  dataset = tf.data.Dataset.from_tensor_slices(
    (rng.random((10, 3), np.float32), rng.integers(0, 2, 10))
  ).batch(4)
  marks, calls, published = [], [], []
  writer = summaries.ScalarWriter(logdir=str(tmp_path))
  unit = evaluation.Evaluation(
    eval_loop=loop_lib.EvalLoop(strategy=strategy, model=model),
    eval_data=(
      strategy.experimental_distribute_dataset(dataset) if data else None
    ),
    every_steps=every_steps,
    train_steps=30,
    writer=writer if writes else None,
    callbacks=(lambda step, metrics: calls.append((step, metrics)),),
    progress=progress_lib.Progress(
      current_step=lambda: 0, listeners=(marks.append,)
    ),
    publish=lambda: published.append(True),
  )
  return unit, writer, marks, calls, published


def test_due_at_multiples_before_the_last_step_which_the_end_evaluates(
  tmp_path,
):
  unit = _evaluation(tmp_path)[0]
  assert [s for s in range(5, 31, 5) if unit.due(s)] == [10, 20]
  assert not any(
    _evaluation(tmp_path, every_steps=0)[0].due(s) for s in range(31)
  )


def test_a_run_writes_publishes_and_calls_back(tmp_path):
  unit, writer, marks, calls, published = _evaluation(tmp_path)
  unit.run(10)
  writer.close()
  assert unit.metrics["examples"] == 10
  assert [m.phase for m in marks] == ["evaluation", "evaluation"]
  assert calls == [(10, unit.metrics)] and published == [True]
  scalars = read_scalars(str(tmp_path / summaries.VALIDATION))
  assert scalars["loss"][0][0] == 10


def test_with_a_side_car_evaluator_only_the_callbacks_see_it(tmp_path):
  unit, _, _, calls, published = _evaluation(tmp_path, writes=False)
  unit.run(10)
  assert len(calls) == 1 and not published


def test_no_eval_data_no_evaluation(tmp_path):
  unit, _, marks, calls, _ = _evaluation(tmp_path, data=False)
  unit.run(10)
  assert (marks, calls, unit.metrics) == ([], [], {})
