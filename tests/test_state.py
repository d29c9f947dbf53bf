"""ctl.train.state: the trainer and the evaluator build and restore the same state."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from ctl.errors import UserError
from ctl.train import options
from ctl.train import state


def _task():
  return options.Task(
    build_model=lambda: keras.Sequential(
      [
        keras.Input((4,)),
        keras.layers.Dropout(0.5, seed=1),
        keras.layers.Dense(2),
      ]
    ),
    build_optimizer=lambda: keras.optimizers.Adam(0.1),
    train_dataset_fn=lambda context, step, seed: tf.data.Dataset.from_tensors(
      (tf.zeros([2, 4]), tf.zeros([2], tf.int64))
    ),
    eval_dataset_fn=None,
    global_batch_size=2,
  )


def test_an_evaluator_restores_the_model_and_step_of_a_training_checkpoint(
  tmp_path,
):
  strategy = tf.distribute.get_strategy()
  trained = state.build_state(task=_task(), strategy=strategy, seed=7)
  assert trained.optimizer.built and trained.optimizer.variables
  trained.global_step.assign(42)
  trained.model.layers[-1].kernel.assign(tf.ones([4, 2]))
  path = trained.checkpoint().save(str(tmp_path / "ckpt"))

  evaluator = state.build_state(
    task=_task(), strategy=strategy, with_optimizer=False
  )
  assert evaluator.optimizer is None
  evaluator.checkpoint().restore(path).assert_existing_objects_matched()
  assert int(evaluator.global_step.numpy()) == 42
  assert int(evaluator.data_seed.numpy()) == 7
  np.testing.assert_array_equal(
    evaluator.model.layers[-1].kernel.numpy(), np.ones([4, 2])
  )


def test_the_checkpoint_holds_the_dropout_rng_state():
  built = state.build_state(task=_task(), strategy=tf.distribute.get_strategy())
  assert built.checkpoint().rng  # Keras' SeedGenerator state, saved too.


def _spec(*leaves):
  """A batch's element spec: (dtype, per-example shape) leaves, batch None."""
  return tuple(tf.TensorSpec([None, *shape], dtype) for dtype, shape in leaves)


_X, _Y, _W = (tf.float32, [4]), (tf.int64, []), (tf.float32, [])


def test_evaluation_batches_may_differ_from_training_by_the_sample_weight():
  for train, evaluation in [
    ((_X, _Y, _W), (_X, _Y)),
    ((_X, _Y), (_X, _Y, _W)),
    ((_X, _Y, _W), (_X, _Y, _W)),
    ((_X, _Y), ((tf.float32, [None]), _Y)),  # A dimension left unknown.
  ]:
    state.check_eval_batches(_spec(*evaluation), _spec(*train))


def test_evaluation_batches_of_another_structure_dtype_or_rank_are_refused():
  for evaluation, shown in [
    ((_X,), r"\(float32\[4\]\)"),
    ((_X, (tf.int32, [])), r"\(float32\[4\], int32\[\]\)"),
    (((tf.float32, [4, 1]), _Y), r"\(float32\[4,1\], int64\[\]\)"),
  ]:
    with pytest.raises(UserError, match=shown + r".*\(float32\[4\], int64"):
      state.check_eval_batches(_spec(*evaluation), _spec(_X, _Y, _W))
  features = {"x": tf.TensorSpec([None, 4])}
  with pytest.raises(UserError, match=r"\{x: float32\[4\]\}"):
    state.check_eval_batches({"y": features["x"]}, features)


def test_evaluation_examples_of_another_size_are_the_models_to_take():
  # A fully convolutional model may evaluate larger images than it trains
  # on: the step is traced for the evaluation batches anew.
  state.check_eval_batches(_spec((tf.float32, [6]), _Y), _spec(_X, _Y))
