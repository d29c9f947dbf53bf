"""Tests for ctl.train.evaluation: when a run evaluates, and where metrics go."""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

import ctl
from ctl.telemetry import progress as progress_lib
from ctl.telemetry import summaries
from ctl.testing.run_files import read_scalars
from ctl.train import evaluation
from ctl.train import loop as loop_lib
from tests import tasks
from tests.test_step import _refused


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


def test_evaluation_batches_of_another_structure_are_refused_before_step_0(
  tmp_path,
):
  # Labels of another dtype failed at the first evaluation, after the
  # step-0 checkpoint and ten steps; the sentence shows both structures.
  task = tasks.regression()
  int_labels = lambda context: task.eval_dataset_fn(context).map(
    lambda x, y: (x, tf.cast(y, tf.int32))
  )
  _refused(
    tmp_path,
    dataclasses.replace(task, eval_dataset_fn=int_labels),
    r"\(float32\[5\], int32\[\]\).*\(float32\[5\], float32\[\]\)",
  )


def test_evaluation_batches_the_default_step_cannot_take_are_refused_early(
  tmp_path,
):
  # A task with its own replica_step but no compute_loss trains on dicts
  # and evaluates them with the default step, which takes (x, y) only.
  task = tasks.regression()

  def replica_step(context, batch):
    with tf.GradientTape() as tape:
      y_pred = context.model(batch["x"], training=True)
      per_example = tf.square(batch["y"] - y_pred)
      loss = context.average_loss(per_example)
    variables = context.model.trainable_variables
    context.optimizer.apply_gradients(
      zip(tape.gradient(loss, variables), variables)
    )
    return ctl.StepOutput(per_example, batch["y"], y_pred)

  as_dicts = lambda dataset: dataset.map(lambda x, y: {"x": x, "y": y})
  _refused(
    tmp_path,
    dataclasses.replace(
      task,
      replica_step=replica_step,
      train_dataset_fn=lambda *args: as_dicts(task.train_dataset_fn(*args)),
      eval_dataset_fn=lambda context: as_dicts(task.eval_dataset_fn(context)),
    ),
    r"\(inputs, targets\).*got dict",
  )
