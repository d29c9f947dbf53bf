"""What a run is made of, built once at start-up: its outputs, the model's
state, the compiled loops and the duties the controller calls between loops.

`assemble` opens the outputs and builds each part from the records the
controller splits `RunOptions` into where the run starts (`Place`,
`LoopSchedule`, `CheckpointSchedule`; docs/design.md), so no part reads the
options themselves and the controller (`ctl.train.controller`) only drives
the parts. They are closed together (`Parts.close`), checkpoint writes first.
"""

from collections.abc import Callable, Sequence
import dataclasses
import posixpath

from absl import logging
import numpy as np
import tensorflow as tf

from ctl.checkpoint import checkpointing
from ctl.checkpoint import export as export_lib
from ctl.checkpoint import run_checkpoints
from ctl.checkpoint import save_policy
from ctl.checkpoint.tiers import checkpoint_tiers
from ctl.checkpoint.tiers import node_tiers
from ctl.errors import TrainingDiverged
from ctl.errors import UserError
from ctl.io import fencing
from ctl.io import outputs as outputs_lib
from ctl.io import storage
from ctl.resilience import faults as faults_lib
from ctl.resilience import stragglers as stragglers_lib
from ctl.telemetry import ledger as ledger_lib
from ctl.telemetry import profiler
from ctl.telemetry import progress as progress_lib
from ctl.telemetry import summaries
from ctl.train import actions as actions_lib
from ctl.train import evaluation as evaluation_lib
from ctl.train import loop as loop_lib
from ctl.train import metric_set
from ctl.train import metrics_window
from ctl.train import state as state_lib
from ctl.train import step as step_lib
from ctl.train.options import Task


@dataclasses.dataclass(frozen=True)
class Place:
  """Where the run writes and who writes it (from `RunOptions`).

  Attributes:
    dirs: the run's output directories (ctl.io.outputs.OutputDirs).
    is_chief: whether this worker writes them (the others write nothing).
    storage_route: how gs:// directories are reached (ctl.io.storage.ROUTES).
    fuse_root: where Cloud Storage FUSE mounts buckets.
    job_id: the supervisor's job id, or "": the local tier and the lease
      belong to it.
    evaluator_writes_validation: a side-car evaluator writes the validation
      summaries, so the chief's evaluations are not written to TensorBoard.
  """

  dirs: outputs_lib.OutputDirs
  is_chief: bool
  storage_route: str
  fuse_root: str
  job_id: str
  evaluator_writes_validation: bool


@dataclasses.dataclass(frozen=True)
class LoopSchedule:
  """How the train loops run (from `RunOptions`, whose fields these are).

  Attributes:
    train_steps: the global step to train to.
    steps_per_loop: steps per `tf.function` call.
    log_every_steps: log line and train summaries interval.
    eval_every_steps: evaluation interval; 0 evaluates only at the end.
    profile_steps: (first, last) global steps to trace, or None.
    seed: the data order's seed.
    xla: compile the forward and backward pass with XLA.
    train_metrics: update the task's metrics at every training step.
    max_nan_recoveries: rollbacks allowed after a non-finite loss.
    reshuffle_on_nan: use a new data order after a rollback.
  """

  train_steps: int
  steps_per_loop: int
  log_every_steps: int
  eval_every_steps: int
  profile_steps: tuple[int, int] | None
  seed: int
  xla: bool
  train_metrics: bool
  max_nan_recoveries: int
  reshuffle_on_nan: bool


@dataclasses.dataclass(frozen=True)
class CheckpointSchedule:
  """When and where checkpoints are saved (from `RunOptions`).

  Attributes:
    every_steps: checkpoint interval in steps; 0: none by steps.
    every_secs: interval in seconds, 0 (none) or "auto" (Young/Daly).
    expected_mtbf_secs: the failure interval "auto" assumes at first.
    keep: how many checkpoints to keep.
    async_save: write checkpoints in the background.
    local_tier: the local tier's setting (`RunOptions.local_checkpoints`).
    local_every_steps: the local tier's interval (0: every loop).
  """

  every_steps: int
  every_secs: float | str
  expected_mtbf_secs: float
  keep: int
  async_save: bool
  local_tier: str
  local_every_steps: int


@dataclasses.dataclass(frozen=True)
class Parts:
  """What a run is made of, built once at start-up (`assemble`)."""

  outputs: outputs_lib.OpenedOutputs
  state: state_lib.TrainState
  checkpoints: run_checkpoints.RunCheckpoints
  loop: loop_lib.TrainLoop
  writer: summaries.ScalarWriter
  profiler: profiler.StepProfiler
  window: metrics_window.MetricsWindow
  evaluation: evaluation_lib.Evaluation
  stragglers: stragglers_lib.Watch  # Enabled on the chief only.
  divergence: "DivergenceGuard"
  actions: actions_lib.LoopActions
  metric_names: tuple[str, ...]  # The task's metrics, in their order.

  def close(self) -> None:
    """Finishes checkpoint writes, then publishes and releases outputs."""
    self.checkpoints.close()
    self.profiler.stop()
    self.writer.close()
    self.outputs.close()


def assemble(
  *,
  task: Task,
  place: Place,
  schedule: LoopSchedule,
  checkpoint_schedule: CheckpointSchedule,
  strategy: tf.distribute.Strategy,
  progress: progress_lib.Progress,
  ledger: ledger_lib.Ledger | ledger_lib.Unkept,
  faults: faults_lib.Injector | None,
  eval_callbacks: Sequence[Callable[[int, dict], None]],
  loop_actions: Sequence[actions_lib.Action],
  fence: fencing.Fence,
) -> Parts:
  """Opens the outputs and builds the model, its loops and the duties."""
  task.validate()
  outputs = _open_outputs(place, fence)
  state = state_lib.build_state(
    task=task, strategy=strategy, seed=schedule.seed
  )
  step_lib.check_default_batches(task, state.batch_spec, evaluation=False)
  export_lib.check_serving(state.model, task.serving)
  metrics = metric_set.MetricSet(task.build_metrics, strategy=strategy)
  actions = actions_lib.LoopActions(
    loop_actions, record=_recorder(ledger, "stopped_early")
  )
  _bind_actions(loop_actions, task, place, state, fence)
  shared = _Shared(
    task=task,
    place=place,
    schedule=schedule,
    strategy=strategy,
    progress=progress,
    ledger=ledger,
    fence=fence,
    outputs=outputs,
    state=state,
    metrics=metrics,
    writer=_writer(outputs, fence),
  )
  return Parts(
    outputs=outputs,
    state=state,
    checkpoints=_checkpoints(
      shared, checkpoint_schedule, state.checkpoint(actions=actions.stateful())
    ),
    loop=_train_loop(shared, faults),
    writer=shared.writer,
    profiler=profiler.StepProfiler(
      steps=schedule.profile_steps,
      logdir=shared.writer.run_dir(summaries.TRAIN),
    ),
    window=_window(shared),
    evaluation=_evaluation(shared, eval_callbacks),
    stragglers=stragglers_lib.Watch(enabled=place.is_chief),
    divergence=DivergenceGuard(max_recoveries=schedule.max_nan_recoveries),
    actions=actions,
    metric_names=metrics.names,
  )


@dataclasses.dataclass(frozen=True)
class _Shared:
  """What the builders of the parts read: the run's inputs to `assemble`
  and the pieces built first (outputs, state, metrics, writer)."""

  task: Task
  place: Place
  schedule: LoopSchedule
  strategy: tf.distribute.Strategy
  progress: progress_lib.Progress
  ledger: ledger_lib.Ledger | ledger_lib.Unkept
  fence: fencing.Fence
  outputs: outputs_lib.OpenedOutputs
  state: state_lib.TrainState
  metrics: metric_set.MetricSet
  writer: summaries.ScalarWriter


def _writer(outputs, fence) -> summaries.ScalarWriter:
  """The chief's TensorBoard writer (none elsewhere), fenced."""
  tensorboard = outputs.tensorboard
  return summaries.ScalarWriter(
    logdir=tensorboard and tensorboard.local_path, fence=fence
  )


def _window(shared: _Shared) -> metrics_window.MetricsWindow:
  """The training metrics between two log lines, and where they go."""
  optimizer = shared.state.optimizer
  return metrics_window.MetricsWindow(
    metrics=shared.metrics,
    train_steps=shared.schedule.train_steps,
    global_batch_size=shared.task.global_batch_size,
    writer=shared.writer,
    publish=lambda: _publish(shared.outputs.tensorboard),
    learning_rate=lambda: float(tf.convert_to_tensor(optimizer.learning_rate)),
  )


def _evaluation(shared: _Shared, callbacks) -> evaluation_lib.Evaluation:
  """Evaluation during the run: the eval loop, its data, where it writes."""
  task, schedule, strategy = shared.task, shared.schedule, shared.strategy
  return evaluation_lib.Evaluation(
    eval_loop=loop_lib.EvalLoop(
      strategy=strategy,
      model=shared.state.model,
      compute_loss=step_lib.compute_loss_of(
        task, metric_names=shared.metrics.names
      ),
      metrics=shared.metrics,
    ),
    eval_data=(
      strategy.distribute_datasets_from_function(
        _checked_eval(task, shared.state.batch_spec)
      )
      if task.eval_dataset_fn
      else None
    ),
    every_steps=schedule.eval_every_steps,
    train_steps=schedule.train_steps,
    writer=(
      None if shared.place.evaluator_writes_validation else shared.writer
    ),
    publish=lambda: _publish(shared.outputs.tensorboard),
    callbacks=callbacks,
    progress=shared.progress,
    record=_recorder(shared.ledger, "evaluated"),
  )


# Where `ctl.KeepBest` keeps the best evaluation's SavedModel, and inside
# it, committed with it, the checkpoint of the state that made it.
BEST_EXPORT = "best_saved_model"
BEST_CHECKPOINT = "checkpoint/ckpt"


def _bind_actions(loop_actions, task, place, state, fence) -> None:
  """Gives each action that asks for it (`bind`, as `ctl.KeepBest`) the
  run's `keep(step)`: the model exported into `<model_dir>/BEST_EXPORT`
  with the run's checkpoint at `BEST_CHECKPOINT` inside it (every worker
  takes part, the chief commits both at once, fenced and atomic)."""
  binding = [action for action in loop_actions if hasattr(action, "bind")]
  if not binding:
    return
  if task.serving is None:
    raise UserError("ctl.KeepBest keeps an export, but Task.serving is None.")
  location = (
    storage.open_location(
      posixpath.join(place.dirs.model_dir, BEST_EXPORT),
      storage=place.storage_route,
      fuse_root=place.fuse_root,
      fence=fence,
    )
    if place.is_chief
    else None
  )

  checkpoint = state.checkpoint()

  def keep(step: int) -> None:
    export_lib.export_saved_model(
      model=state.model,
      location=location,
      serving=task.serving,
      step=step,
      fence=fence,
      write_beside=lambda directory: checkpoint.write(
        posixpath.join(directory, BEST_CHECKPOINT)
      ),
    )

  for action in binding:
    action.bind(keep)


def _checked_eval(task, training_spec):
  """The task's `eval_dataset_fn`, refusing with one sentence when the run
  is built (it is called then, nothing read) an endless dataset (an
  evaluation of it would never end) or batches the step cannot take, alone
  or as it takes those of `training_spec` (state.check_eval_batches), not
  at the first evaluation."""

  def dataset_fn(input_context):
    dataset = task.eval_dataset_fn(input_context)
    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
      raise UserError(
        "Task.eval_dataset_fn returned an endless dataset (a .repeat() "
        "without a count?): an evaluation must end."
      )
    spec = dataset.element_spec
    step_lib.check_default_batches(task, spec, evaluation=True)
    state_lib.check_eval_batches(spec, training_spec)
    return dataset

  return dataset_fn


def _recorder(ledger, kind: str) -> Callable[..., None]:
  """`record(**fields)` of a `kind` event in the run ledger (the chief's;
  nothing on the other workers)."""
  return lambda **fields: ledger.record(kind, **fields)


def _open_outputs(place: Place, fence) -> outputs_lib.OpenedOutputs:
  """The run's output directories (the chief's commit through `fence`)."""
  return outputs_lib.open_outputs(
    place.dirs,
    is_chief=place.is_chief,
    storage_route=place.storage_route,
    fuse_root=place.fuse_root,
    fence=fence,
  )


def _checkpoints(
  shared: _Shared, schedule: CheckpointSchedule, checkpoint
) -> run_checkpoints.RunCheckpoints:
  """The checkpoint duty: into the local tier (ctl.checkpoint.tiers.checkpoint_tiers;
  none when its setting is "off") in front of `location` (fetched first),
  when the `schedule` says."""
  place, state, fence = shared.place, shared.state, shared.fence
  progress, location = shared.progress, shared.outputs.checkpoints
  location.fetch()
  setting = node_tiers.setting_for_job(schedule.local_tier, job_id=place.job_id)
  bucket = checkpointing.Checkpointer(
    checkpoint=checkpoint,
    directory=location.local_path,
    is_chief=place.is_chief,
    keep=schedule.keep,
    async_save=schedule.async_save,
    on_saved=lambda: run_checkpoints.upload(location, progress),
    element_spec=state.element_spec,
    global_batch_size=state.global_batch_size,
  )
  return run_checkpoints.RunCheckpoints(
    checkpointer=checkpoint_tiers.build(
      bucket=bucket,
      bucket_url=location.url,
      strategy=shared.strategy,
      setting=setting,
      job_id=place.job_id,
      keep=schedule.keep,
      is_chief=place.is_chief,
      on_saved=lambda: location.publish(commit_file=checkpointing.STATE_FILE),
      need_bytes=state_lib.checkpoint_bytes(state),
      waiting=lambda: progress.phase(progress_lib.CHECKPOINT_UPLOAD),
      fence=fence,
      lease_place=dict(
        model_dir=place.dirs.model_dir,
        job=place.job_id,
        storage_route=place.storage_route,
        fuse_root=place.fuse_root,
      ),
    ),
    policy=save_policy.SavePolicy(
      every_steps=schedule.every_steps,
      every_secs=schedule.every_secs,
      expected_mtbf_secs=schedule.expected_mtbf_secs,
      train_steps=shared.schedule.train_steps,
      is_chief=place.is_chief,
      accounting=shared.ledger.accounting,
    ),
    progress=progress,
    global_step=state.global_step,
    restores=state.restores,
    fence=fence,
    local_every_steps=setting != "off"
    and (schedule.local_every_steps or shared.schedule.steps_per_loop),
    record=_recorder(shared.ledger, "checkpoint_restore"),
  )


def _train_loop(shared: _Shared, faults) -> loop_lib.TrainLoop:
  """The compiled train loop of the task's step (with the fault injector's
  loss hook when faults are injected)."""
  state = shared.state
  with shared.strategy.scope():
    loss_hook = faults and faults.loss_hook()
  return loop_lib.TrainLoop(
    strategy=shared.strategy,
    model=state.model,
    optimizer=state.optimizer,
    global_step=state.global_step,
    global_batch_size=shared.task.global_batch_size,
    steps_per_loop=shared.schedule.steps_per_loop,
    compute_loss=step_lib.compute_loss_of(
      shared.task, metric_names=shared.metrics.names
    ),
    replica_step=step_lib.replica_step_of(
      shared.task, metric_names=shared.metrics.names
    ),
    metrics=shared.metrics,
    jit_compile=shared.schedule.xla,
    train_metrics=shared.schedule.train_metrics,
    loss_hook=loss_hook,
  )


def _publish(location) -> None:
  if location:
    location.publish()


class DivergenceGuard:
  """Counts rollbacks after non-finite losses and says when to give up."""

  def __init__(self, *, max_recoveries: int):
    self._max_recoveries = max_recoveries
    self.recoveries = 0

  def record(self, losses: np.ndarray, *, last_step: int) -> None:
    """Records a loop whose `losses` (ending at `last_step`) were not finite.

    Raises:
      TrainingDiverged: when no rollback is left.
    """
    first_bad = last_step - len(losses) + int(np.argmin(np.isfinite(losses)))
    self.recoveries += 1
    if self.recoveries > self._max_recoveries:
      raise TrainingDiverged(
        f"The loss was not finite at step {first_bad} after "
        f"{self._max_recoveries} rollbacks; stopping without saving it. "
        "Lower the learning rate or check the data."
      )
    logging.warning(
      "Loss not finite at step %d; rolling back to the last "
      "checkpoint (recovery %d of %d).",
      first_bad,
      self.recoveries,
      self._max_recoveries,
    )
