"""What to train and how: the frozen options `ctl.train.controller.run` takes.

`Task` holds plain callables (ctl knows no model or dataset); `RunOptions`
holds directories, intervals and switches, and checks them up front so a bad
value fails in one sentence before anything is built or written. Importing
this module does not import TensorFlow, so a command line can check its
options in a fraction of a second.
"""

from collections.abc import Callable, Mapping
import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

from ctl.errors import UserError
from ctl.io.outputs import OutputDirs

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
      cross-entropy (ctl.train.loop's).
  """

  build_model: Callable[[], "keras.Model"]
  build_optimizer: Callable[[], "keras.optimizers.Optimizer"]
  train_dataset_fn: Callable[..., "tf.data.Dataset"]
  eval_dataset_fn: Callable[..., "tf.data.Dataset"] | None
  global_batch_size: int
  image_shape: tuple[int, int, int]
  loss_fn: Callable | None = None


# --local_checkpoints: where the local tier lives ("auto" chooses), or "off".
_TIER_SETTINGS = ("auto", "ram", "disk", "off")


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How to train. Intervals are in steps and must align with the loop.

  Attributes:
    dirs: the run's output directories, one value (ctl.io.outputs.OutputDirs:
      the run dir with `train_summary.json`, checkpoints, TensorBoard logs,
      the export; each a local path, gs://BUCKET/PATH or a FUSE path).
    train_steps: the global step to train to.
    steps_per_loop: steps per `tf.function` call (host touched once each).
    log_every_steps: log line and train summaries interval.
    eval_every_steps: evaluation interval; 0 evaluates only at the end.
    checkpoint_every_steps: checkpoint interval; 0 disables step-based saves.
    checkpoint_every_secs: time-based checkpoints (chief's clock, agreed by
      all workers); 0 disables them; "auto" picks the Young/Daly interval
      from the measured save cost and failure rate (ctl.telemetry.goodput).
    expected_mtbf_secs: the mean time between failures "auto" assumes while
      the run ledger has seen no failure.
    keep_checkpoints: how many checkpoints to keep.
    async_checkpoint: write checkpoints in the background.
    seed: seed of the data order (and of initialization, set by the caller).
    xla: compile the forward and backward pass with XLA.
    train_accuracy: count correct predictions at every step for the train
      accuracy (logged and summarized); False saves those ops per step.
    max_nan_recoveries: rollbacks allowed after a non-finite loss.
    reshuffle_on_nan: use a new data order after a rollback.
    is_chief: whether this worker owns the outputs.
    storage: how gs:// directories are reached (ctl.io.storage.ROUTES).
    fuse_root: where Cloud Storage FUSE mounts buckets.
    restarts: how many times a supervisor restarted the job (reported).
    profile_steps: (first, last) global steps to capture a profiler trace
      of (chief), or None; see ctl.telemetry.profiler.
    hparams: the run's hyperparameters, {name: bool, int, float or str},
      written for TensorBoard's HParams dashboard (the caller chooses them).
    evaluator_writes_validation: a side-car evaluator writes the validation
      summaries, so the chief's own evaluations are logged and reported but
      not written to TensorBoard (one writer per run dir).
    lease_stale_secs: the chief's lease on the run directory (ctl.resilience.lease) is
      renewed every quarter of this; one not renewed for this long may be
      taken over by another trainer.
    take_over_lease: take the run directory's lease whoever holds it (for
      an operator who knows the holder is dead).
    job_id: the supervisor's job id (ctl.launch's CTL_JOB_ID, Vertex AI's
      CLOUD_ML_JOB_ID), or ""; a restart of the same job takes its lease.
    local_checkpoints: where each worker's local checkpoint tier lives
      (ctl.checkpoint.local_tier): "auto" (with a `job_id`, a RAM disk with
      room for two checkpoints, else local disk; without one, none: no
      restart could find it), "ram", "disk", an absolute directory, or
      "off" (the bucket alone).
    local_checkpoint_every_steps: local save interval (0: every loop).
  """

  dirs: OutputDirs
  train_steps: int
  steps_per_loop: int = 100
  log_every_steps: int = 100
  eval_every_steps: int = 0
  checkpoint_every_steps: int = 1000
  checkpoint_every_secs: float | str = 1800.0
  expected_mtbf_secs: float = 86400.0
  keep_checkpoints: int = 3
  async_checkpoint: bool = False
  seed: int = 0
  xla: bool = False
  train_accuracy: bool = True
  max_nan_recoveries: int = 3
  reshuffle_on_nan: bool = False
  is_chief: bool = True
  storage: str = "auto"
  fuse_root: str = "/gcs"
  restarts: int = 0
  profile_steps: tuple[int, int] | None = None
  hparams: Mapping[str, bool | int | float | str] = dataclasses.field(
    default_factory=dict
  )
  evaluator_writes_validation: bool = False
  lease_stale_secs: float = 120.0
  take_over_lease: bool = False
  job_id: str = ""
  local_checkpoints: str = "auto"
  local_checkpoint_every_steps: int = 0

  def lease_terms(self):
    """The terms of the run directory's lease (ctl.resilience.lease), or
    None on a worker that is not the chief (it takes no lease)."""
    from ctl.resilience import lease  # pylint: disable=g-import-not-at-top

    if not self.is_chief:
      return None
    return lease.Terms(
      model_dir=self.dirs.model_dir,
      job=self.job_id,
      stale_secs=self.lease_stale_secs,
      take_over=self.take_over_lease,
      storage_route=self.storage,
      fuse_root=self.fuse_root,
    )

  def validate(self) -> None:
    """Raises UserError with one sentence for the first bad option."""
    if self.train_steps < 0:
      raise UserError(f"train_steps must be >= 0, got {self.train_steps}.")
    if self.steps_per_loop < 1:
      raise UserError(
        f"steps_per_loop must be >= 1, got {self.steps_per_loop}."
      )
    for name in (
      "log_every_steps",
      "eval_every_steps",
      "checkpoint_every_steps",
      "local_checkpoint_every_steps",
    ):
      value = getattr(self, name)
      if value < 0 or value % self.steps_per_loop:
        raise UserError(
          f"{name} must be a multiple of steps_per_loop "
          f"({self.steps_per_loop}), got {value}."
        )
    if self.log_every_steps == 0:
      raise UserError("log_every_steps must be > 0.")
    if self.local_checkpoints not in _TIER_SETTINGS and not (
      self.local_checkpoints.startswith("/")
    ):
      raise UserError(
        "local_checkpoints must be auto, ram, disk, off or an absolute "
        f"directory, got {self.local_checkpoints!r}."
      )
    if self.keep_checkpoints < (2 if self.async_checkpoint else 1):
      raise UserError(
        "keep_checkpoints must be >= 2 with async_checkpoint (so a complete "
        "checkpoint is never deleted before its successor is written), "
        f"got {self.keep_checkpoints}."
        if self.async_checkpoint
        else f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}."
      )
    if isinstance(self.checkpoint_every_secs, str):
      if self.checkpoint_every_secs != "auto":
        raise UserError(
          "checkpoint_every_secs must be auto or a number of "
          f"seconds, got {self.checkpoint_every_secs!r}."
        )
    elif self.checkpoint_every_secs < 0:
      raise UserError("checkpoint_every_secs must be >= 0.")
    if not self.expected_mtbf_secs > 0:
      raise UserError("expected_mtbf_secs must be > 0.")
    if not self.lease_stale_secs > 0:
      raise UserError(
        f"lease_stale_secs must be > 0, got {self.lease_stale_secs}."
      )
    if self.max_nan_recoveries < 0:
      raise UserError("max_nan_recoveries must be >= 0.")
    if self.profile_steps is not None:
      first, last = self.profile_steps
      if not 1 <= first <= last:
        raise UserError(
          "profile_steps must be START,END with 1 <= START <= "
          f"END, got {first},{last}."
        )


def default(options_class: type, name: str):
  """The declared default of field `name` of a dataclass (e.g. RunOptions).

  Command lines take their defaults from here, so each default is written
  once, where the option is declared.
  """
  for field in dataclasses.fields(options_class):
    if field.name == name:
      if field.default is dataclasses.MISSING:
        raise ValueError(f"{options_class.__name__}.{name} has no default.")
      return field.default
  raise ValueError(f"{options_class.__name__} has no field {name!r}.")


def from_flags(build: Callable, flags: Any, **values) -> Any:
  """Calls `build` with each keyword it takes from the flag of that name.

  Command lines name their flags after the keywords (or dataclass fields) of
  what they build, so none spells out `name=flags.name` for each: the
  trainer's flags give `RunOptions`, ctl-vertex's and ctl-k8s's give their
  job specs.

  Args:
    build: a callable or a dataclass.
    flags: an object with one attribute per flag (an argparse or absl
      namespace, the trainer's configuration).
    **values: the keywords whose values are not a flag of their name, or not
      its value as it stands; they win over a flag of the same name.

  Returns:
    What `build` returns; a keyword with neither keeps its default.
  """
  parameters = inspect.signature(build).parameters
  taken = {
    name: getattr(flags, name) for name in parameters if hasattr(flags, name)
  }
  return build(**(taken | values))
