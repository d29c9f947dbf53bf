"""What to train and how: the frozen options `ctl.controller.run` takes.

`Task` holds plain callables (ctl knows no model or dataset); `RunOptions`
holds directories, intervals and switches, and checks them up front so a bad
value fails in one sentence before anything is built or written. Importing
this module does not import TensorFlow, so a command line can check its
options in a fraction of a second.
"""

import dataclasses
from typing import Callable, TYPE_CHECKING

from ctl.errors import UserError

if TYPE_CHECKING:
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top


@dataclasses.dataclass(frozen=True)
class Task:
  """What to train, as plain callables (ctl knows no model or dataset).

  Attributes:
    build_model: returns a Keras model mapping images to logits; called
      under `strategy.scope()`.
    build_optimizer: returns a Keras optimizer; called under the scope.
    train_dataset_fn: `(input_context, start_step, seed) -> dataset` of
      per-replica batches whose first batch belongs to `start_step`.
    eval_dataset_fn: `(input_context) -> finite dataset`, or None.
    global_batch_size: examples per step over all replicas.
    image_shape: (height, width, channels) of one input image.
    loss_fn: `(labels, logits) -> per-example loss`; None: sparse softmax
      cross-entropy (ctl.loop's).
  """
  build_model: Callable[[], "keras.Model"]
  build_optimizer: Callable[[], "keras.optimizers.Optimizer"]
  train_dataset_fn: Callable[..., "tf.data.Dataset"]
  eval_dataset_fn: Callable[..., "tf.data.Dataset"] | None
  global_batch_size: int
  image_shape: tuple[int, int, int]
  loss_fn: Callable | None = None


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How to train. Intervals are in steps and must align with the loop.

  Attributes:
    model_dir: where `train_summary.json` goes.
    checkpoint_dir: the CheckpointManager directory.
    tensorboard_dir: where event files go.
    export_dir: where the SavedModel goes.
      (Each a local path, gs://BUCKET/PATH or a FUSE path: see ctl.storage.)
    train_steps: the global step to train to.
    steps_per_loop: steps per `tf.function` call (host touched once each).
    log_every_steps: log line and train summaries interval.
    eval_every_steps: evaluation interval; 0 evaluates only at the end.
    checkpoint_every_steps: checkpoint interval; 0 disables step-based saves.
    checkpoint_every_secs: time-based checkpoints (chief's clock, agreed by
      all workers); 0 disables them.
    keep_checkpoints: how many checkpoints to keep.
    async_checkpoint: write checkpoints in the background.
    seed: seed of the data order (and of initialization, set by the caller).
    xla: compile the forward and backward pass with XLA.
    max_nan_recoveries: rollbacks allowed after a non-finite loss.
    reshuffle_on_nan: use a new data order after a rollback.
    inject_nan: test hook: "none", "always", or a global step at which the
      loss is made NaN once.
    is_chief: whether this worker owns the outputs.
    storage: how gs:// directories are reached (ctl.storage.ROUTES).
    fuse_root: where Cloud Storage FUSE mounts buckets.
    restarts: how many times a supervisor restarted the job (reported).
  """
  model_dir: str
  checkpoint_dir: str
  tensorboard_dir: str
  export_dir: str
  train_steps: int
  steps_per_loop: int = 100
  log_every_steps: int = 100
  eval_every_steps: int = 0
  checkpoint_every_steps: int = 1000
  checkpoint_every_secs: float = 1800.0
  keep_checkpoints: int = 3
  async_checkpoint: bool = False
  seed: int = 0
  xla: bool = False
  max_nan_recoveries: int = 3
  reshuffle_on_nan: bool = False
  inject_nan: str = "none"
  is_chief: bool = True
  storage: str = "auto"
  fuse_root: str = "/gcs"
  restarts: int = 0

  def validate(self) -> None:
    """Raises UserError with one sentence for the first bad option."""
    if self.train_steps < 0:
      raise UserError(f"train_steps must be >= 0, got {self.train_steps}.")
    if self.steps_per_loop < 1:
      raise UserError(
          f"steps_per_loop must be >= 1, got {self.steps_per_loop}.")
    for name in ("log_every_steps", "eval_every_steps",
                 "checkpoint_every_steps"):
      value = getattr(self, name)
      if value < 0 or value % self.steps_per_loop:
        raise UserError(
            f"{name} must be a multiple of steps_per_loop "
            f"({self.steps_per_loop}), got {value}.")
    if self.log_every_steps == 0:
      raise UserError("log_every_steps must be > 0.")
    if self.keep_checkpoints < (2 if self.async_checkpoint else 1):
      raise UserError(
          "keep_checkpoints must be >= 2 with async_checkpoint (so a complete "
          "checkpoint is never deleted before its successor is written), "
          f"got {self.keep_checkpoints}." if self.async_checkpoint else
          f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}.")
    if self.checkpoint_every_secs < 0:
      raise UserError("checkpoint_every_secs must be >= 0.")
    if self.max_nan_recoveries < 0:
      raise UserError("max_nan_recoveries must be >= 0.")
    if self.inject_nan not in ("none", "always") and not (
        self.inject_nan.isdigit()):
      raise UserError("inject_nan must be none, always or a step number, "
                      f"got {self.inject_nan!r}.")
