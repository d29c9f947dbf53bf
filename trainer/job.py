"""From the trainer's configuration (flag values) to a runnable ctl job.

Order matters and is kept here in one place: the cluster is read and the
strategy built before TensorFlow runs any op (MultiWorkerMirroredStrategy
requires it), determinism and the mixed-precision policy are set before the
model exists, and every check a user can fail runs before training starts.
"""

import dataclasses
import os
from typing import Any, Callable, Sequence

from absl import logging
import keras
import tensorflow as tf

from ctl import cluster as cluster_lib
from ctl import controller
from ctl import evaluator
from ctl import faults as faults_lib
from ctl import hypertune
from ctl import input as input_lib
from ctl import outputs
from ctl import peers
from ctl import strategies
from ctl import watchdog as watchdog_lib
from ctl.errors import UserError
from ctl.options import RunOptions, Task
from trainer import data as data_lib
from trainer import model as model_lib

_POLICIES = {"none": "float32", "bf16": "mixed_bfloat16",
             "fp16": "mixed_float16"}


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

  def run(self) -> dict:
    if self.is_evaluator:
      return evaluator.evaluate_checkpoints(
          task=self.task, options=self.options, strategy=self.strategy)
    try:
      return controller.run(task=self.task, options=self.options,
                            strategy=self.strategy,
                            eval_callbacks=self.eval_callbacks,
                            faults=self.faults, watchdog=self.watchdog)
    finally:
      if self.watchdog:
        self.watchdog.stop()


def build_job(config: Any, environ=os.environ) -> Job:
  """Validates the configuration and builds the job.

  Args:
    config: an object with one attribute per trainer flag.
    environ: the process environment (TF_CONFIG, CTL_RESTART_COUNT, ...).

  Returns:
    The job.

  Raises:
    UserError: for the first thing in the configuration a user must fix.
  """
  _check(config)
  limits = watchdog_lib.Limits(
      stall_timeout_secs=config.stall_timeout_secs,
      startup_timeout_secs=config.startup_timeout_secs)
  limits.validate()
  cluster = cluster_lib.resolve(environ=environ)
  restarts = int(environ.get("CTL_RESTART_COUNT", "0"))
  rank = _rank(cluster)
  faults = faults_lib.from_environ(environ, worker=rank, attempt=restarts)
  dirs = _output_dirs(config, environ)
  if config.deterministic:
    tf.config.experimental.enable_op_determinism()
  keras.utils.set_random_seed(config.seed)
  watchdog = None
  if not cluster.is_evaluator:
    peers.wait_for_peers(cluster, timeout_secs=config.startup_timeout_secs)
    if limits.enabled:  # From here on, start-up is watched.
      watchdog = watchdog_lib.Watchdog(
          limits=limits, worker=rank,
          heartbeat_dir=environ.get(watchdog_lib.HEARTBEAT_DIR_ENV)).start()
  # An evaluator trains with no one, whatever strategy the workers use.
  strategy = strategies.make_strategy(
      name="auto" if cluster.is_evaluator else config.strategy,
      cluster=cluster, collective=config.collective)
  logging.info("%s; this process is %s %d of a %d-worker cluster.",
               strategies.describe(strategy), cluster.task_type,
               cluster.task_index, cluster.num_workers)
  keras.mixed_precision.set_global_policy(_POLICIES[config.mixed_precision])
  source = data_lib.load(config.dataset, image_size=config.image_size,
                         data_dir=config.data_dir, storage=config.storage,
                         fuse_root=config.fuse_root,
                         manifest_dir=dirs.checkpoint_dir,
                         is_chief=cluster.is_chief)
  global_batch = config.per_replica_batch_size * strategy.num_replicas_in_sync
  train_steps = _train_steps(config, source, global_batch)
  options = RunOptions(
      **dataclasses.asdict(dirs),
      train_steps=train_steps,
      steps_per_loop=config.steps_per_loop,
      log_every_steps=config.log_every_steps,
      eval_every_steps=config.eval_every_steps,
      checkpoint_every_steps=config.checkpoint_every_steps,
      checkpoint_every_secs=_every_secs(config.checkpoint_every_secs),
      expected_mtbf_secs=config.expected_mtbf_secs,
      keep_checkpoints=config.keep_checkpoints,
      async_checkpoint=config.async_checkpoint,
      seed=config.seed,
      xla=config.xla,
      train_accuracy=config.train_accuracy,
      max_nan_recoveries=config.max_nan_recoveries,
      reshuffle_on_nan=config.reshuffle_on_nan,
      is_chief=cluster.is_chief,
      storage=config.storage,
      fuse_root=config.fuse_root,
      restarts=restarts,
      profile_steps=_profile_steps(config.profile_steps),
      hparams=_hparams(config, global_batch, train_steps),
      evaluator_writes_validation=cluster.has_evaluator)
  options.validate()
  task = _task(config, source, global_batch, train_steps)
  callbacks = []
  if config.hypertune_metric:
    reporter = hypertune.MetricReporter(config.hypertune_metric,
                                        is_chief=cluster.is_chief)
    callbacks.append(
        lambda step, metrics: reporter.report(metrics[config.hypertune_metric],
                                              step))
  return Job(task=task, options=options, strategy=strategy,
             eval_callbacks=tuple(callbacks),
             is_evaluator=cluster.is_evaluator, watchdog=watchdog,
             faults=faults)


def describe(config: Any, environ=os.environ) -> dict:
  """What a run would do, checked without loading data or TensorFlow state.

  Used by `--dry_run` (e.g. to check a container's default command).
  """
  _check(config)
  cluster = cluster_lib.resolve(environ=environ)
  return {"cluster": dataclasses.asdict(cluster),
          "output_dirs": dataclasses.asdict(_output_dirs(config, environ)),
          "flags": vars(config)}


def _rank(cluster: cluster_lib.ClusterInfo) -> int:
  """The worker number in logs and faults: the chief 0, then the workers."""
  if cluster.task_type == "worker" and cluster.chief:
    return cluster.task_index + 1
  return cluster.task_index


def _output_dirs(config, environ) -> outputs.OutputDirs:
  return outputs.resolve_output_dirs(
      model_dir=config.model_dir, checkpoint_dir=config.checkpoint_dir,
      tensorboard_dir=config.tensorboard_dir, export_dir=config.export_dir,
      job_dir=config.job_dir, environ=environ)


def _check(config) -> None:
  """Checks that need no TensorFlow, so mistakes fail in a second."""
  if config.per_replica_batch_size <= 0:
    raise UserError("--per_replica_batch_size must be > 0, got "
                    f"{config.per_replica_batch_size}.")
  if config.train_steps is None and config.epochs is None:
    raise UserError("Set --train_steps or --epochs.")
  if config.train_steps is not None and config.epochs is not None:
    raise UserError("Set --train_steps or --epochs, not both.")
  if config.epochs is not None and config.epochs <= 0:
    raise UserError(f"--epochs must be > 0, got {config.epochs}.")
  if config.learning_rate <= 0:
    raise UserError(f"--learning_rate must be > 0, got "
                    f"{config.learning_rate}.")
  _profile_steps(config.profile_steps)
  _every_secs(config.checkpoint_every_secs)
  if config.hypertune_metric not in ("", "accuracy", "loss"):
    raise UserError("--hypertune_metric must be accuracy or loss, got "
                    f"{config.hypertune_metric!r}.")
  model_lib.check_weights(name=config.model, weights=config.weights)


def _profile_steps(text: str) -> tuple[int, int] | None:
  """Parses --profile_steps=START,END (checked further by RunOptions)."""
  if not text:
    return None
  parts = text.split(",")
  if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
    raise UserError("--profile_steps must be START,END (two step numbers, "
                    f"e.g. 100,110), got {text!r}.")
  return int(parts[0]), int(parts[1])


def _hparams(config, global_batch: int, train_steps: int) -> dict:
  """The options that make runs differ, for TensorBoard's HParams dashboard.

  Names are the trainer's flag names (as hyperparameter tuning passes them),
  plus the global batch and the resolved number of steps.
  """
  hparams = {name: getattr(config, name) for name in (
      "model", "dataset", "image_size", "weights", "dropout", "optimizer",
      "learning_rate", "lr_schedule", "warmup_steps", "per_replica_batch_size",
      "mixed_precision", "xla", "steps_per_loop", "seed")}
  return {**hparams, "global_batch_size": global_batch,
          "train_steps": train_steps}


def _every_secs(value: str) -> float | str:
  """--checkpoint_every_secs: "auto" or a number of seconds."""
  if value == "auto":
    return value
  try:
    return float(value)
  except ValueError:
    raise UserError("--checkpoint_every_secs must be auto or a number of "
                    f"seconds, got {value!r}.") from None


def _train_steps(config, source: data_lib.Source, global_batch: int) -> int:
  steps_per_epoch = input_lib.steps_per_epoch(source.num_train, global_batch)
  if steps_per_epoch < 1:
    raise UserError(f"The global batch ({global_batch}) is larger than the "
                    f"training split ({source.num_train} examples).")
  if config.epochs is not None:
    return config.epochs * steps_per_epoch
  return config.train_steps


def _task(config, source: data_lib.Source, global_batch: int,
          train_steps: int) -> Task:
  """The model, optimizer and datasets as plain callables."""

  def build_model():
    return model_lib.build_model(name=config.model,
                                 num_classes=source.num_classes,
                                 image_shape=source.image_shape,
                                 weights=config.weights,
                                 dropout=config.dropout)

  def build_optimizer():
    lr = config.learning_rate
    if config.lr_schedule == "cosine":
      warmup = min(config.warmup_steps, train_steps)
      lr = keras.optimizers.schedules.CosineDecay(
          initial_learning_rate=0.0 if warmup else lr,
          decay_steps=max(train_steps - warmup, 1), warmup_target=(
              lr if warmup else None), warmup_steps=warmup)
    optimizer = (keras.optimizers.Adam(lr) if config.optimizer == "adam" else
                 keras.optimizers.SGD(lr, momentum=0.9))
    if config.mixed_precision == "fp16":
      optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer

  def train_dataset_fn(input_context, start_step, seed):
    return input_lib.train_dataset(
        records=source.train_records, num_records=source.num_train,
        decode_fn=source.decode_fn, input_context=input_context,
        global_batch_size=global_batch, seed=seed, start_step=start_step,
        shuffle_buffer=source.shuffle_buffer)

  def eval_dataset_fn(input_context):
    return input_lib.eval_dataset(
        records=source.eval_records, decode_fn=source.decode_fn,
        input_context=input_context, global_batch_size=global_batch)

  return Task(
      build_model=build_model, build_optimizer=build_optimizer,
      train_dataset_fn=train_dataset_fn, eval_dataset_fn=eval_dataset_fn,
      global_batch_size=global_batch, image_shape=source.image_shape)
