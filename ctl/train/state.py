"""What a run trains and checkpoints, built one way for every user of it.

The training controller and the side-car evaluator (ctl.train.evaluator) restore
the same checkpoints, so they build the same objects here: the model, the
optimizer (training only), the global step, the data seed, the restore count,
and the `tf.train.Checkpoint` that holds them with the RNG state of every
Keras `SeedGenerator` (see ctl.checkpoint.checkpointing).
"""

import dataclasses
import math

import keras
import tensorflow as tf

from ctl.checkpoint import checkpointing
from ctl.train.options import Task


@dataclasses.dataclass(frozen=True)
class TrainState:
  """The variables a run's checkpoint holds.

  Attributes:
    model: the Keras model.
    optimizer: the built optimizer; None for evaluation only.
    global_step: int64, incremented once per training step.
    data_seed: int64, the seed of the data order (changes on a reshuffle).
    restores: int64, how many times the run was restored.
    input_shape: (height, width, channels) of one model input (the task's
      image shape), saved with every checkpoint (see ctl.checkpoint.checkpointing).
    global_batch_size: examples per step over all replicas (the task's),
      saved with every checkpoint: the data order is a function of it.
  """

  model: keras.Model
  optimizer: keras.optimizers.Optimizer | None
  global_step: tf.Variable
  data_seed: tf.Variable
  restores: tf.Variable
  input_shape: tuple[int, int, int]
  global_batch_size: int

  def checkpoint(self) -> tf.train.Checkpoint:
    """A checkpoint of everything that decides the next step."""
    parts = dict(
      model=self.model,
      global_step=self.global_step,
      data_seed=self.data_seed,
      restores=self.restores,
      rng=checkpointing.seed_generator_states(self.model),
    )
    if self.optimizer is not None:
      parts["optimizer"] = self.optimizer
    return tf.train.Checkpoint(**parts)


def build_state(
  *,
  task: Task,
  strategy: tf.distribute.Strategy,
  seed: int = 0,
  with_optimizer: bool = True,
) -> TrainState:
  """Builds the state under `strategy.scope()`.

  Args:
    task: what to train (its `build_model` and `build_optimizer`).
    strategy: the strategy the variables belong to.
    seed: the initial data seed (a restore replaces it).
    with_optimizer: build and `build()` the optimizer, so that no variable is
      created later inside a `tf.function`; False for evaluation only.

  Returns:
    The state.
  """
  counter = dict(
    trainable=False,
    dtype=tf.int64,
    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
  )
  with strategy.scope():
    model = task.build_model()
    optimizer = None
    if with_optimizer:
      optimizer = task.build_optimizer()
      optimizer.build(model.trainable_variables)
    return TrainState(
      model=model,
      optimizer=optimizer,
      global_step=tf.Variable(0, name="global_step", **counter),
      data_seed=tf.Variable(seed, name="data_seed", **counter),
      restores=tf.Variable(0, name="restores", **counter),
      input_shape=tuple(task.image_shape),
      global_batch_size=task.global_batch_size,
    )


def checkpoint_bytes(state: TrainState) -> int:
  """About the size of one checkpoint: every model and optimizer variable."""
  variables = [*state.model.variables]
  if state.optimizer is not None:
    variables += state.optimizer.variables
  return sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in variables)
