"""From the trainer's configuration (flag values) to a runnable ctl job.

Order matters and is kept here in one place: the cluster is read and the
strategy built before TensorFlow runs any op (MultiWorkerMirroredStrategy
requires it), determinism and the mixed-precision policy are set before the
model exists, and every check a user can fail runs before training starts.
"""

from collections.abc import Callable, Sequence
import dataclasses
import os
from typing import Any

import keras
import tensorflow as tf

from ctl import UserError
from ctl import env
from ctl.data import datafiles
from ctl.data import input as input_lib
from ctl.distributed import environment as environment_lib
from ctl.distributed import peers
from ctl.io import storage
from ctl.resilience import faults as faults_lib
from ctl.resilience import lease
from ctl.resilience import watchdog as watchdog_lib
from ctl.telemetry import hypertune
from ctl.telemetry import progress
from ctl.train import controller
from ctl.train import evaluator
from ctl.train import optimizers
from ctl.train.options import RunOptions
from ctl.train.options import Task
from ctl.train.options import image_classification

from . import checks
from . import data as data_lib
from . import model as model_lib

_POLICIES = {
  "none": "float32",
  "bf16": "mixed_bfloat16",
  "fp16": "mixed_float16",
}


@dataclasses.dataclass(frozen=True)
class Job:
  """Everything `controller.run` needs, ready to go."""

  task: Task
  options: RunOptions
  strategy: tf.distribute.Strategy
  eval_callbacks: Sequence[Callable[[int, dict], None]] = ()
  is_evaluator: bool = False
  watchdog: watchdog_lib.Watchdog | None = None  # Started; stopped by run.
  faults: tuple[faults_lib.Fault, ...] = ()
  progress_listeners: tuple[progress.Listener, ...] = ()

  def run(self) -> dict:
    if self.is_evaluator:
      return evaluator.evaluate_checkpoints(
        task=self.task, options=self.options, strategy=self.strategy
      )
    try:
      # Every other field is the `controller.run` argument of its name.
      return controller.run(
        **{
          field.name: getattr(self, field.name)
          for field in dataclasses.fields(self)
          if field.name != "is_evaluator"
        }
      )
    finally:
      if self.watchdog:
        self.watchdog.stop()


def build_job(config: Any, environ=os.environ) -> Job:
  """Builds the job of a configuration that passed `checks.check`.

  The checks run once per start, before TensorFlow loads (`trainer.task`);
  what only the loaded data or the strategy can tell is checked here.

  Args:
    config: an object with one attribute per trainer flag.
    environ: the process environment (TF_CONFIG, CTL_RESTART_COUNT, ...).

  Returns:
    The job.

  Raises:
    UserError: for the first thing in the configuration a user must fix.
  """
  if config.data_dir:  # Not in `checks`: --dry_run accepts placeholders.
    storage.check_url(config.data_dir, fuse_root=config.fuse_root)
  # The same path as a `ctl.environment` user's, with the watchdog started
  # between the peers' answer and the strategy, so it watches the build.
  platform = checks.environment(config, environ)
  rank, restarts = platform.rank, platform.restarts
  faults = faults_lib.from_environ(environ, worker=rank, attempt=restarts)
  if config.deterministic:
    tf.config.experimental.enable_op_determinism()
  keras.utils.set_random_seed(config.seed)
  watchdog = _await_peers(config, platform, environ=environ)
  listeners = progress.events_from_environ(
    environ, worker=rank, attempt=restarts
  )
  # Before the cluster forms (TensorFlow then holds the GIL): see lease.py.
  lease.await_watch(platform.dirs.model_dir)
  platform = platform.with_strategy(
    name=config.strategy, collective=config.collective
  )
  strategy = platform.strategy
  keras.mixed_precision.set_global_policy(_POLICIES[config.mixed_precision])
  source = _load_data(
    config,
    manifest_dir=platform.dirs.checkpoint_dir,
    is_chief=platform.is_chief,
    watchdog=watchdog,
    listeners=listeners,
  )
  global_batch = config.per_replica_batch_size * strategy.num_replicas_in_sync
  train_steps = _train_steps(config, source, global_batch)
  options = checks.run_options(
    config, platform, train_steps=train_steps, global_batch=global_batch
  )
  options.validate()
  return Job(
    task=_task(config, source, global_batch, train_steps),
    options=options,
    strategy=strategy,
    eval_callbacks=_eval_callbacks(config, platform.is_chief),
    is_evaluator=platform.is_evaluator,
    watchdog=watchdog,
    faults=faults,
    progress_listeners=listeners,
  )


def _load_data(
  config, *, manifest_dir: str, is_chief: bool, watchdog, listeners
) -> data_lib.Source:
  """The data source, loaded in the data_listing phase.

  Listing and checking files is I/O: each directory and file is progress for
  the watchdog (a beat), so a read that hangs is a stall of the steady limit
  that names the file, not a wait for the start-up limit.
  """
  marks = progress.Progress(
    current_step=lambda: 0,  # Before the restore: the step is not known.
    listeners=(watchdog, *listeners) if watchdog else listeners,
  )
  with marks.phase(progress.DATA_LISTING):
    return data_lib.load(
      config.dataset,
      image_size=config.image_size,
      data_dir=config.data_dir,
      storage=config.storage,
      fuse_root=config.fuse_root,
      manifest_dir=manifest_dir,
      is_chief=is_chief,
      skip_bad_images=config.skip_bad_images,
      max_image_pixels=config.max_image_pixels,
      beat=watchdog.beat if watchdog else datafiles.no_beat,
    )


def _await_peers(
  config, platform: environment_lib.Environment, *, environ
) -> watchdog_lib.Watchdog | None:
  """Waits for the other workers; the started watchdog, if any.

  From the watchdog's start on, start-up is watched; an evaluator waits for
  no one and is not watched.
  """
  if platform.is_evaluator:
    return None
  peers.wait_for_peers(
    platform.cluster, timeout_secs=config.startup_timeout_secs
  )
  limits = checks.watchdog_limits(config)
  if not limits.enabled:
    return None
  return watchdog_lib.Watchdog(
    limits=limits,
    worker=platform.rank,
    heartbeat_dir=env.heartbeat_dir(environ),
  ).start()


def _eval_callbacks(
  config, is_chief: bool
) -> tuple[Callable[[int, dict], None], ...]:
  """Reports `--hypertune_metric` after each evaluation (Vertex AI tuning)."""
  if not config.hypertune_metric:
    return ()
  reporter = hypertune.MetricReporter(
    config.hypertune_metric, is_chief=is_chief
  )
  return (
    lambda step, metrics: reporter.report(
      metrics[config.hypertune_metric], step
    ),
  )


def _train_steps(config, source: data_lib.Source, global_batch: int) -> int:
  steps_per_epoch = input_lib.steps_per_epoch(source.num_train, global_batch)
  if steps_per_epoch < 1:
    raise UserError(
      f"The global batch ({global_batch}) is larger than the "
      f"training split ({source.num_train} examples)."
    )
  if config.epochs is not None:
    return config.epochs * steps_per_epoch
  return config.train_steps


def _task(
  config, source: data_lib.Source, global_batch: int, train_steps: int
) -> Task:
  """The model, optimizer and datasets as plain callables."""

  def build_model():
    return model_lib.build_model(
      name=config.model,
      num_classes=source.num_classes,
      image_shape=source.image_shape,
      weights=config.weights,
      dropout=config.dropout,
    )

  def train_dataset_fn(input_context, start_step, seed):
    return source.train_dataset(
      global_batch_size=global_batch,
      input_context=input_context,
      seed=seed,
      start_step=start_step,
    )

  def eval_dataset_fn(input_context):
    return input_lib.eval_dataset(
      records=source.eval_records,
      decode_fn=source.decode_fn,
      input_context=input_context,
      global_batch_size=global_batch,
    )

  return image_classification(
    build_model=build_model,
    build_optimizer=lambda: _optimizer(config, train_steps),
    train_dataset_fn=train_dataset_fn,
    eval_dataset_fn=eval_dataset_fn,
    global_batch_size=global_batch,
    image_shape=source.image_shape,
    **({} if config.export else {"serving": None}),  # --noexport: none.
  )


def _optimizer(config, train_steps: int) -> keras.optimizers.Optimizer:
  """The optimizer, its rate following `--lr_schedule` to `train_steps`."""
  lr = config.learning_rate
  schedule = _ConstantRate(lr)
  if config.lr_schedule == "cosine":
    warmup = min(config.warmup_steps, train_steps)
    schedule = keras.optimizers.schedules.CosineDecay(
      initial_learning_rate=0.0 if warmup else lr,
      decay_steps=max(train_steps - warmup, 1),
      warmup_target=(lr if warmup else None),
      warmup_steps=warmup,
    )
  optimizer = (
    optimizers.Adam(lr)
    if config.optimizer == "adam"
    else optimizers.SGD(lr, momentum=0.9)
  )
  # The rate is configuration, not state. Built with a float, every
  # optimizer has the same variables (a rate variable included), so
  # checkpoints match whatever the schedule; it then follows the schedule
  # and never reads the (restored) rate variable, so a resume may change
  # the rate, the schedule or the warmup. Keras' public setter would drop
  # the variable from the tracked list, which checkpoints refuse.
  optimizer._learning_rate = schedule  # pylint: disable=protected-access
  if config.mixed_precision == "fp16":
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  return optimizer


class _ConstantRate(keras.optimizers.schedules.LearningRateSchedule):
  """The same learning rate at every step."""

  def __init__(self, rate: float):
    self.rate = rate

  def __call__(self, step):
    del step  # Unused.
    return self.rate

  def get_config(self):
    return {"rate": self.rate}
