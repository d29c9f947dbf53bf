"""What to train and how: the frozen options `ctl.train.controller.run` takes.

`Task` holds plain callables (ctl knows no model or dataset);
`image_classification` is the ready-made task of images, logits and sparse
labels. `RunOptions` holds directories, intervals and switches, and checks
them up front so a bad value fails in one sentence before anything is built
or written. Importing this module does not import TensorFlow, so a command
line can check its options in a fraction of a second.
"""

from collections.abc import Callable, Mapping
import dataclasses
import inspect
import math
import os
from typing import TYPE_CHECKING, Any

from ctl.checkpoint.serving import FROM_MODEL
from ctl.checkpoint.serving import Serving
from ctl.checkpoint.serving import image_serving
from ctl.errors import UserError
from ctl.io.outputs import OutputDirs
from ctl.resilience.lease import DEFAULT_STALE_SECS

if TYPE_CHECKING:
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top


@dataclasses.dataclass(frozen=True)
class Task:
  """What to train, as plain callables (ctl knows no model or dataset).

  The step is the task's (ctl.train.step): by default `(x, y)` or
  `(x, y, sample_weight)` batches of any nested structure and dtype, the
  model called on `x` and `loss_fn(y, y_pred)`; `compute_loss` replaces the
  forward pass, `replica_step` the whole update. ctl runs it in replica
  context, many steps per `tf.function` call, with the loss averaged over
  the global batch. `image_classification` (below) is the ready-made task
  of images, logits and sparse labels.

  Attributes:
    build_model: returns a Keras model; called under `strategy.scope()`.
    build_optimizer: returns a Keras optimizer; called under the scope.
    train_dataset_fn: `(input_context, start_step, seed) -> dataset` of
      per-replica batches whose first batch belongs to `start_step`; endless
      (the run stops at a step target).
    eval_dataset_fn: `(input_context) -> finite dataset`, or None.
    global_batch_size: examples per step over all replicas.
    loss_fn: `(y_true, y_pred) -> per-example loss` (shape [batch], not
      reduced) of the default forward pass; None: sparse softmax
      cross-entropy.
    compute_loss: `(model, batch, training) -> ctl.StepOutput`, the forward
      pass for batches of another structure; None: the default.
    replica_step: `(ctl.StepContext, batch) -> ctl.StepOutput`, the whole
      replica update (gradients taken and applied by the user); None: ctl's.
    build_metrics: `() -> {name: keras.metrics.Metric}`, called once for the
      replicas and once for the host; each metric's state must be sums
      (every built-in Keras metric's is). None: the loss alone.
    serving: the export's `serving_default` signature: "model" (from the
      model's own inputs, returning its outputs), a `Serving`, or None (no
      SavedModel is exported).
  """

  build_model: Callable[[], "keras.Model"]
  build_optimizer: Callable[[], "keras.optimizers.Optimizer"]
  train_dataset_fn: Callable[..., "tf.data.Dataset"]
  eval_dataset_fn: Callable[..., "tf.data.Dataset"] | None
  global_batch_size: int
  loss_fn: Callable | None = None
  compute_loss: Callable | None = None
  replica_step: Callable | None = None
  build_metrics: Callable[[], Mapping] | None = None
  serving: Serving | str | None = FROM_MODEL

  def validate(self) -> None:
    """Raises UserError with one sentence for the first bad field."""
    for name in ("build_model", "build_optimizer", "train_dataset_fn"):
      if not callable(getattr(self, name)):
        raise UserError(f"Task.{name} must be callable.")
    for name in (
      "eval_dataset_fn",
      "loss_fn",
      "compute_loss",
      "replica_step",
      "build_metrics",
    ):
      value = getattr(self, name)
      if value is not None and not callable(value):
        raise UserError(f"Task.{name} must be callable or None.")
    if (
      isinstance(self.global_batch_size, bool)
      or not isinstance(self.global_batch_size, int)
      or self.global_batch_size < 1
    ):
      raise UserError(
        "Task.global_batch_size must be a whole number >= 1, got "
        f"{self.global_batch_size!r}."
      )
    if self.compute_loss is not None and self.loss_fn is not None:
      raise UserError(
        "Task.loss_fn is for the default forward pass: give it or "
        "Task.compute_loss, not both."
      )
    if not (
      self.serving is None
      or self.serving == FROM_MODEL
      or isinstance(self.serving, Serving)
    ):
      raise UserError(
        f'Task.serving must be "{FROM_MODEL}", a ctl.Serving or None, got '
        f"{self.serving!r}."
      )


def image_classification(
  *, image_shape: tuple[int, int, int], **fields
) -> Task:
  """The ready-made task of images -> logits with sparse integer labels.

  Sparse softmax cross-entropy (unless `loss_fn` is given), an `accuracy`
  metric, and the export's `image_serving` signature.

  Args:
    image_shape: (height, width, channels) of one input image.
    **fields: the other `Task` fields.
  """
  from ctl.train import metric_set  # pylint: disable=g-import-not-at-top

  defaults = dict(
    build_metrics=metric_set.sparse_accuracy,
    serving=image_serving(image_shape),
  )
  return Task(**(defaults | fields))


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
    seed: seed of the data order, handed to `train_dataset_fn` and
      checkpointed; not of the initial weights (the caller seeds those, e.g.
      `keras.utils.set_random_seed` before `ctl.run`).
    xla: compile the forward and backward pass with XLA.
    train_metrics: update the task's metrics at every training step (logged
      and summarized as `train/NAME`); False saves those ops per step.
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
    start_flags: how this start was set up, as a flagfile's lines
      (`--name=value`; the trainer gives its effective flags): the run
      ledger's start event keeps them, the chief writes them beside it as a
      flagfile an operator can start the same way again with (`--flagfile`,
      ctl.telemetry.ledger), and `ctl-report` says what changed between
      attempts.
    evaluator_writes_validation: a side-car evaluator writes the validation
      summaries, so the chief's own evaluations are logged and reported but
      not written to TensorBoard (one writer per run dir).
    lease_stale_secs: the chief's lease on the run directory (ctl.resilience.lease) is
      renewed every quarter of this, at most 5 s apart; one not renewed for this long may be
      taken over by another trainer.
    take_over_lease: take the run directory's lease whoever holds it (for
      an operator who knows the holder is dead).
    job_id: the supervisor's job id (ctl.launch's CTL_JOB_ID, Vertex AI's
      CLOUD_ML_JOB_ID), or ""; a restart of the same job takes its lease.
    local_checkpoints: where each worker's local checkpoint tier lives
      (ctl.checkpoint.tiers.local_tier): "auto" (with a `job_id`, a RAM disk with
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
  train_metrics: bool = True
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
  start_flags: tuple[str, ...] = ()
  evaluator_writes_validation: bool = False
  lease_stale_secs: float = DEFAULT_STALE_SECS
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
    _check_types(self)
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
    _check_profile_steps(self.profile_steps)


# RunOptions fields by the kind of value they hold (the others are checked
# by `RunOptions.validate` itself).
_WHOLE_NUMBERS = (
  "train_steps",
  "steps_per_loop",
  "log_every_steps",
  "eval_every_steps",
  "checkpoint_every_steps",
  "keep_checkpoints",
  "seed",
  "max_nan_recoveries",
  "restarts",
  "local_checkpoint_every_steps",
)
_SECONDS = ("expected_mtbf_secs", "lease_stale_secs")
_SWITCHES = (
  "async_checkpoint",
  "xla",
  "train_metrics",
  "reshuffle_on_nan",
  "is_chief",
  "evaluator_writes_validation",
  "take_over_lease",
)


def _check_profile_steps(steps: tuple[int, int] | None) -> None:
  if steps is not None and not 1 <= steps[0] <= steps[1]:
    raise UserError(
      "profile_steps must be START,END with 1 <= START <= "
      f"END, got {steps[0]},{steps[1]}."
    )


def _check_types(options: "RunOptions") -> None:
  """UserError naming the first option whose value is of the wrong kind:
  a whole number, a finite number of seconds, a switch."""
  for name in _WHOLE_NUMBERS:
    value = getattr(options, name)
    if isinstance(value, bool) or not isinstance(value, int):
      raise UserError(f"{name} must be a whole number, got {value!r}.")
  seconds = [*_SECONDS]
  if not isinstance(options.checkpoint_every_secs, str):  # Text: validate's.
    seconds.append("checkpoint_every_secs")
  for name in seconds:
    value = getattr(options, name)
    if (
      isinstance(value, bool)
      or not isinstance(value, (int, float))
      or not math.isfinite(value)
    ):
      raise UserError(f"{name} must be a finite number, got {value!r}.")
  for name in _SWITCHES:
    if not isinstance(getattr(options, name), bool):
      raise UserError(
        f"{name} must be True or False, got {getattr(options, name)!r}."
      )
  flags = options.start_flags
  if not isinstance(flags, tuple) or not all(
    isinstance(f, str) and f.startswith("--") for f in flags
  ):
    raise UserError(
      f"start_flags must be a tuple of '--name=value' strings, got {flags!r}."
    )
  for name in ("model_dir", "checkpoint_dir"):
    path = getattr(options.dirs, name, None)
    if path and "://" not in path and os.path.isfile(path):
      raise UserError(f"{name} {path} is a file, not a directory.")


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
