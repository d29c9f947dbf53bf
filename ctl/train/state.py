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
from ctl.errors import UserError
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
    element_spec: what the training batches are (`element_spec_record`),
      saved with every checkpoint (see ctl.checkpoint.checkpointing); None
      for evaluation only (nothing is compared).
    global_batch_size: examples per step over all replicas (the task's),
      saved with every checkpoint: the data order is a function of it.
  """

  model: keras.Model
  optimizer: keras.optimizers.Optimizer | None
  global_step: tf.Variable
  data_seed: tf.Variable
  restores: tf.Variable
  element_spec: str | None
  global_batch_size: int

  def checkpoint(self, *, actions=()) -> tf.train.Checkpoint:
    """A checkpoint of everything that decides the next step: with the
    state that `actions` (loop actions that hold variables) keep."""
    parts = dict(
      model=self.model,
      global_step=self.global_step,
      data_seed=self.data_seed,
      restores=self.restores,
      rng=checkpointing.seed_generator_states(self.model),
    )
    if self.optimizer is not None:
      parts["optimizer"] = self.optimizer
    if actions:
      parts["actions"] = list(actions)
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
    if not model.trainable_variables:
      raise UserError(
        "Task.build_model returned a model with no trainable variable; "
        "build it with its inputs (keras.Input) or call it once on a batch."
      )
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
      element_spec=(
        element_spec_record(task, strategy, seed) if with_optimizer else None
      ),
      global_batch_size=task.global_batch_size,
    )


def element_spec_record(task: Task, strategy, seed: int) -> str:
  """What the task's training batches are, as text: their structure, and
  each tensor's dtype and per-example shape (the batch dimension left out).

  Read from the dataset `train_dataset_fn` builds for the first replica's
  pipeline (nothing is read from it). Its batches must hold the replica's
  share of `global_batch_size`.

  Raises:
    UserError: the function returns no dataset, or batches of another size.
  """
  replicas = strategy.num_replicas_in_sync
  context = tf.distribute.InputContext(
    num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=replicas
  )
  dataset = task.train_dataset_fn(context, 0, seed)
  if not isinstance(dataset, tf.data.Dataset):
    raise UserError(
      "Task.train_dataset_fn must return a tf.data.Dataset, got "
      f"{type(dataset).__name__}."
    )
  if task.global_batch_size % replicas:
    raise UserError(
      f"Task.global_batch_size={task.global_batch_size} must be a multiple "
      f"of the {replicas} replicas."
    )
  expected = task.global_batch_size // replicas
  for spec in tf.nest.flatten(dataset.element_spec):
    shape = spec.shape
    if not shape.rank:
      raise UserError(
        "Task.train_dataset_fn must yield batches (every tensor with a batch "
        f"dimension first), got a tensor of shape {shape}."
      )
    if shape[0] is not None and shape[0] != expected:
      raise UserError(
        f"Task.train_dataset_fn yields batches of {shape[0]}, but "
        f"Task.global_batch_size={task.global_batch_size} over {replicas} "
        f"replica(s) means {expected} per replica."
      )

  return _described(dataset.element_spec)


def _described(spec) -> str:
  """A nested element spec as text: `(float32[16,16,3], int64[])`, a dict's
  keys in order, the batch dimension left out."""
  if isinstance(spec, dict):
    items = (f"{key}: {_described(spec[key])}" for key in sorted(spec))
    return "{" + ", ".join(items) + "}"
  if isinstance(spec, (tuple, list)):
    return "(" + ", ".join(_described(item) for item in spec) + ")"
  dims = ",".join("?" if d is None else str(d) for d in spec.shape[1:])
  return f"{spec.dtype.name}[{dims}]"


def checkpoint_bytes(state: TrainState) -> int:
  """About the size of one checkpoint: every model and optimizer variable."""
  variables = [*state.model.variables]
  if state.optimizer is not None:
    variables += state.optimizer.variables
  return sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in variables)
