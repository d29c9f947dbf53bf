"""What a run trains and checkpoints, built one way for every user of it.

The training controller and the side-car evaluator (ctl.train.evaluator) restore
the same checkpoints, so they build the same objects here: the model, the
optimizer (training only), the global step, the data seed, the restore count,
and the `tf.train.Checkpoint` that holds them with the RNG state of every
Keras `SeedGenerator` (see ctl.checkpoint.checkpointing).
"""

import dataclasses
import math
from typing import Any

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
    batch_spec: the training batches' element spec (nested `tf.TypeSpec`s),
      which the evaluation batches are held to (`check_eval_batches`); None
      for evaluation only.
    global_batch_size: examples per step over all replicas (the task's),
      saved with every checkpoint: the data order is a function of it.
  """

  model: keras.Model
  optimizer: keras.optimizers.Optimizer | None
  global_step: tf.Variable
  data_seed: tf.Variable
  restores: tf.Variable
  batch_spec: Any
  global_batch_size: int

  @property
  def element_spec(self) -> str | None:
    """What the training batches are (`element_spec_record`), saved with
    every checkpoint (see ctl.checkpoint.checkpointing); None for
    evaluation only (nothing is compared)."""
    if self.batch_spec is None:
      return None
    return element_spec_record(self.batch_spec)

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
    optimizer = batch_spec = None
    if with_optimizer:
      optimizer = task.build_optimizer()
      optimizer.build(model.trainable_variables)
      batch_spec = _training_batch_spec(task, strategy, seed)
    return TrainState(
      model=model,
      optimizer=optimizer,
      global_step=tf.Variable(0, name="global_step", **counter),
      data_seed=tf.Variable(seed, name="data_seed", **counter),
      restores=tf.Variable(0, name="restores", **counter),
      batch_spec=batch_spec,
      global_batch_size=task.global_batch_size,
    )


def _training_batch_spec(task: Task, strategy, seed: int):
  """The element spec of the task's training batches.

  Read from the dataset `train_dataset_fn` builds for the first replica's
  pipeline (nothing is read from it). Its batches must hold the replica's
  share of `global_batch_size`.

  Raises:
    UserError: a global batch the replicas cannot share equally, a function
      that returns no dataset, or batches of another size.
  """
  replicas = strategy.num_replicas_in_sync
  # Before the dataset function runs: one that splits the batch itself
  # (ctl.data.input's, InputContext.get_per_replica_batch_size) would raise
  # TensorFlow's ValueError first, a traceback where a sentence is due.
  if task.global_batch_size % replicas:
    raise UserError(
      f"Task.global_batch_size={task.global_batch_size} must be a multiple "
      f"of the {replicas} replicas."
    )
  context = tf.distribute.InputContext(
    num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=replicas
  )
  dataset = task.train_dataset_fn(context, 0, seed)
  if not isinstance(dataset, tf.data.Dataset):
    raise UserError(
      "Task.train_dataset_fn must return a tf.data.Dataset, got "
      f"{type(dataset).__name__}."
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

  return dataset.element_spec


def element_spec_record(spec) -> str:
  """What batches of element spec `spec` are, as text: their structure, and
  each tensor's dtype and per-example shape (the batch dimension left out),
  e.g. `(float32[16,16,3], int64[])`, a dict's keys in order."""
  if isinstance(spec, dict):
    items = (f"{key}: {element_spec_record(spec[key])}" for key in sorted(spec))
    return "{" + ", ".join(items) + "}"
  if isinstance(spec, (tuple, list)):
    return "(" + ", ".join(element_spec_record(item) for item in spec) + ")"
  dims = ",".join("?" if d is None else str(d) for d in spec.shape[1:])
  return f"{spec.dtype.name}[{dims}]"


def check_eval_batches(eval_spec, training_spec) -> None:
  """Refuses evaluation batches (element spec `eval_spec`) that the step
  cannot take as it takes the training batches (`training_spec`): another
  structure, dtype or per-example rank would fail at the first evaluation,
  after the steps before it (another size is the model's to take or refuse). A sample weight, the
  third of `(x, y, sample_weight)`, may be on either side or both, as the
  default step unpacks it.

  Raises:
    UserError: naming both, as `element_spec_record` writes them.
  """
  if not _alike(_less_weight(eval_spec), _less_weight(training_spec)):
    raise UserError(
      "Task.eval_dataset_fn yields batches "
      f"{element_spec_record(eval_spec)}, but the training batches are "
      f"{element_spec_record(training_spec)}; evaluation runs the same "
      "step, so they must have the same structure, dtypes and per-example "
      "ranks (a sample weight may be left out)."
    )


def _less_weight(spec):
  """`(x, y)` of a batch's spec `(x, y, sample_weight)`; any other as is."""
  return spec[:2] if isinstance(spec, tuple) and len(spec) == 3 else spec


def _alike(spec, other) -> bool:
  """Whether two element specs have one structure and, tensor by tensor,
  one kind, one dtype and one per-example rank (sizes may differ: a fully
  convolutional model may evaluate larger images than it trains on)."""
  try:
    tf.nest.assert_same_structure(spec, other)
  except (ValueError, TypeError):
    return False
  return all(
    type(a) is type(b)
    and a.dtype == b.dtype
    and (
      a.shape.rank is None
      or b.shape.rank is None
      or a.shape.rank == b.shape.rank
    )
    for a, b in zip(tf.nest.flatten(spec), tf.nest.flatten(other))
  )


def checkpoint_bytes(state: TrainState) -> int:
  """About the size of one checkpoint: every model and optimizer variable."""
  variables = [*state.model.variables]
  if state.optimizer is not None:
    variables += state.optimizer.variables
  return sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in variables)
