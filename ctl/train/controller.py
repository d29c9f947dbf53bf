"""The outer loop: bookkeeping between calls of the compiled train loop.

`run` restores the newest readable checkpoint, then repeatedly runs up to
`steps_per_loop` steps in one `tf.function` call and, at loop boundaries only,
logs, writes summaries, evaluates, checkpoints, rolls back a non-finite loss,
and stops when any worker was asked to (SIGTERM). At the end it evaluates,
saves, exports a SavedModel and writes `train_summary.json`.

Steps are targets: `train_steps=N` means "until the global step is N", so the
same call after any interruption continues and ends at the same place.
"""

from collections.abc import Callable, Mapping, Sequence
import contextlib
import dataclasses
import os
import time

import numpy as np
import tensorflow as tf

from ctl.checkpoint import checkpointing
from ctl.checkpoint import finishing
from ctl.distributed import cluster as cluster_lib
from ctl.distributed import environment as environment_lib
from ctl.distributed import peer_loss
from ctl.distributed import worker_exchange
from ctl.errors import PeerLost
from ctl.errors import Preempted
from ctl.errors import TrainingDiverged
from ctl.errors import UserError
from ctl.io import outputs
from ctl.resilience import faults as faults_lib
from ctl.resilience import lease as lease_lib
from ctl.resilience import preemption
from ctl.resilience import watchdog as watchdog_lib
from ctl.telemetry import ledger as ledger_lib
from ctl.telemetry import ledger_reader
from ctl.telemetry import progress as progress_lib
from ctl.train import actions as actions_lib
from ctl.train import parts as parts_lib
from ctl.train.options import RunOptions
from ctl.train.options import Task


def run(
  *,
  task: Task,
  options: RunOptions,
  strategy: tf.distribute.Strategy,
  eval_callbacks: Sequence[Callable[[int, dict], None]] = (),
  progress_listeners: Sequence[progress_lib.Listener] | None = None,
  faults: Sequence[faults_lib.Fault] | None = None,
  watchdog: watchdog_lib.Watchdog | None = None,
  loop_actions: Sequence[actions_lib.Action] = (),
) -> dict:
  """Trains to `options.train_steps`, resuming from the latest checkpoint.

  Args:
    task: what to train.
    options: how to train; split at once into the records each part takes.
    strategy: the distribution strategy (one device, mirrored, multi-worker).
    eval_callbacks: called as `fn(step, eval_metrics)` after each evaluation
      (e.g. to report a hyperparameter-tuning metric).
    progress_listeners: called with every `ctl.telemetry.progress.Mark`
      (each phase's start and end), after the controller's own listeners;
      None: the events file `CTL_EVENTS` names, if any (ctl.env).
    faults: faults to inject (tests and benchmarks; ctl.resilience.faults);
      None: those `CTL_FAULTS` names, when `CTL_FAULTS_ENABLED=1`, so a
      user's script under `ctl-launch` is tested as the trainer is.
    watchdog: a started stall watchdog (ctl.resilience.watchdog), or None;
      it sees every phase first, and its stall is recorded in the ledger.
    loop_actions: called as `fn(step, ctl.LoopResult)` after each loop's
      evaluation, before its checkpoint, on every worker (ctl.train.actions).

  Returns:
    The summary also written to `<model_dir>/train_summary.json` (chief);
    `{"final_step": 0}` when there is nothing to train and no checkpoint.

  Raises:
    UserError: bad options or an incompatible checkpoint.
    Preempted: a stop was requested; the agreed step was saved first.
    TrainingDiverged: the loss stayed non-finite; nothing bad was saved.
  """
  options.validate()
  plan = _Plan(options)
  environment_lib.check_chief(strategy, plan.place.is_chief)
  outputs.check_reachable(  # Before the lease's first read.
    plan.place.dirs,
    is_chief=plan.place.is_chief,
    storage_route=plan.place.storage_route,
    fuse_root=plan.place.fuse_root,
  )
  listeners, faults = _from_environment(
    strategy, plan.start.restarts, progress_listeners, faults
  )
  if watchdog:
    listeners = (watchdog, *listeners)
  with lease_lib.hold(plan.lease) as held:  # One writer per run dir.
    run_state = _Run(task, plan, strategy, eval_callbacks, listeners, faults,
                     fence=lease_lib.fence_of(held), loop_actions=loop_actions)  # fmt: skip
    if watchdog:
      _on_stall(watchdog, run_state.ledger, held, listeners)
    return run_state.run()


@dataclasses.dataclass(frozen=True)
class _Start:
  """What this start of the run is: how many restarts came before it, the
  flags it was started with, the hyperparameters it reports."""

  restarts: int
  start_flags: tuple[str, ...]
  hparams: Mapping[str, bool | int | float | str]


class _Plan:
  """`RunOptions` split where the run starts into the records each part
  takes, each handed down once: no part below reads the options themselves
  (docs/design.md, "Options stop at the door")."""

  def __init__(self, options: RunOptions):
    self.place = parts_lib.Place(
      dirs=options.dirs,
      is_chief=options.is_chief,
      storage_route=options.storage,
      fuse_root=options.fuse_root,
      job_id=options.job_id,
      evaluator_writes_validation=options.evaluator_writes_validation,
    )
    self.lease = options.lease_terms()  # None on a worker: it takes none.
    self.schedule = parts_lib.LoopSchedule(
      train_steps=options.train_steps,
      steps_per_loop=options.steps_per_loop,
      log_every_steps=options.log_every_steps,
      eval_every_steps=options.eval_every_steps,
      profile_steps=options.profile_steps,
      seed=options.seed,
      xla=options.xla,
      train_metrics=options.train_metrics,
      max_nan_recoveries=options.max_nan_recoveries,
      reshuffle_on_nan=options.reshuffle_on_nan,
    )
    self.checkpoints = parts_lib.CheckpointSchedule(
      every_steps=options.checkpoint_every_steps,
      every_secs=options.checkpoint_every_secs,
      expected_mtbf_secs=options.expected_mtbf_secs,
      keep=options.keep_checkpoints,
      async_save=options.async_checkpoint,
      local_tier=options.local_checkpoints,
      local_every_steps=options.local_checkpoint_every_steps,
    )
    self.start = _Start(
      restarts=options.restarts,
      start_flags=options.start_flags,
      hparams=options.hparams,
    )


def _from_environment(strategy, attempt: int, listeners, faults):
  """(progress listeners, faults): those given, else the environment's
  (`CTL_EVENTS`, `CTL_FAULTS`) for this worker and `attempt`."""
  worker = worker_exchange.worker_index(strategy)
  if listeners is None:
    listeners = progress_lib.events_from_environ(
      os.environ, worker=worker, attempt=attempt
    )
  if faults is None:
    faults = faults_lib.from_environ(os.environ, worker=worker, attempt=attempt)
  return tuple(listeners), faults


def _on_stall(watchdog, ledger, held, listeners) -> None:
  """A stall ends the `run` phase, not ok, in the events file (a local
  file, so first: what follows may wait on the bucket), is recorded in the
  ledger, then the lease is released."""
  started = time.monotonic()  # The `run` phase starts right after this.
  events_files = [
    listener
    for listener in listeners
    if isinstance(listener, progress_lib.EventsFile)
  ]

  def end_run(stall: watchdog_lib.Stall) -> None:
    now = time.monotonic()
    ended = progress_lib.Mark(
      phase=progress_lib.RUN, step=stall.step, time=time.time(),
      seconds=now - started, ok=False, error="Stalled", monotonic=now,
    )  # fmt: skip
    for events_file in events_files:
      events_file(ended)

  watchdog.add_stall_callback(end_run)
  watchdog.add_stall_callback(
    lambda stall: ledger.record("stall", **dataclasses.asdict(stall))
  )
  if held:
    watchdog.add_stall_callback(lambda _: held.release())


class _Run:
  """One `run` call: start-up, the loops (`_Loops`), the finishing steps.

  Start-up assembles the run's parts (`ctl.train.parts`) and restores the
  newest checkpoint; `_Loops` trains to the target; the finishing steps
  (`ctl.checkpoint.finishing`) evaluate, save, export and summarize.
  """

  def __init__(
    self,
    task,
    plan: _Plan,
    strategy,
    eval_callbacks,
    progress_listeners,
    faults,
    *,
    fence,
    loop_actions=(),
  ):
    self._task = task
    self._plan = plan
    self._strategy = strategy
    self._fence = fence  # Checked before every commit (ctl.io.fencing).
    self._eval_callbacks = eval_callbacks
    self._loop_actions = loop_actions
    self._started = time.monotonic()  # For the summary's wall_seconds.
    self._restored_step = 0  # The step start-up restored.
    self._loops = None  # _Loops, once start-up is done.
    self.ledger, self._faults, self._progress = _observers(
      plan.place,
      plan.start,
      faults,
      progress_listeners,
      current_step=self._current_step,
      fence=fence,
    )
    self._parts = None  # parts_lib.Parts, from the start of start-up.

  def _current_step(self) -> int:
    """The global step as the host knows it: the restored one, then the
    loops' (progress marks never wait on a device-to-host copy)."""
    return self._loops.step if self._loops else self._restored_step

  def run(self) -> dict:
    """The whole run, from start-up to the summary: the one place a run is
    entered and left (what must hold for all of it wraps this)."""
    with self._progress.phase(progress_lib.RUN):
      try:
        return self._train()
      except Exception as error:  # pylint: disable=broad-except
        lost = peer_loss.describe(error, cluster_lib.resolve())
        if lost is None:
          raise
        self.ledger.record("peer_lost", step=self._current_step(), peer=lost)
        peer_loss.tell_the_others(lost, error)
        raise PeerLost(f"{lost}; its node is gone or cut off.") from None

  def _train(self) -> dict:
    plan = self._plan
    with self._progress.phase(progress_lib.STARTUP):
      restored = self._start_up()
      if not restored and not plan.schedule.train_steps:
        summary = finishing.nothing_to_train(
          checkpoint_dir=plan.place.dirs.checkpoint_dir, ledger=self.ledger
        )
        self._parts.close()
        return summary
      self._parts.writer.write_hparams(
        plan.start.hparams, self._parts.metric_names
      )
    self._parts.checkpoints.start()
    # A new run saves its step 0 (a rollback target for the divergence
    # guard, a fixed start) once its first loop is traced: a step that
    # cannot work is refused with nothing saved.
    self._loops = _Loops(
      self._parts,
      self._task,
      plan.schedule,
      self._strategy,
      self._faults,
      self._progress,
      step=self._restored_step,
      save_first=not restored and bool(plan.schedule.max_nan_recoveries),
      is_chief=plan.place.is_chief,
    )
    with preemption.StopRequest() as stop:
      self._loops.until(plan.schedule.train_steps, stop)
    return self._finish(trained=self._loops.step > self._restored_step)

  def _start_up(self) -> bool:
    """Assembles the run's parts and restores the newest checkpoint;
    returns whether one was restored."""
    plan = self._plan
    self._parts = parts_lib.assemble(
      task=self._task,
      place=plan.place,
      schedule=plan.schedule,
      checkpoint_schedule=plan.checkpoints,
      strategy=self._strategy,
      progress=self._progress,
      ledger=self.ledger,
      faults=self._faults,
      eval_callbacks=self._eval_callbacks,
      loop_actions=self._loop_actions,
      fence=self._fence,
    )
    # The names each evaluation reports (LoopResult.eval_metrics); None: none.
    evaluated = (
      ("loss", *self._parts.metric_names)
      if self._task.eval_dataset_fn
      else None
    )
    with _closed_on_user_error(self._parts):
      self._parts.actions.check(evaluated)
    with self._progress.phase(progress_lib.RESTORE):
      restored, self._restored_step = self._parts.checkpoints.restore_at_start(
        directory=plan.place.dirs.checkpoint_dir,
        train_steps=plan.schedule.train_steps,
      )
    return restored

  def _finish(self, *, trained: bool) -> dict:
    """The finishing steps: evaluate, save, export, write the summary."""
    parts, step = self._parts, self._loops.step
    if parts.evaluation.step != step:  # Not if a loop action stopped after it.
      _evaluate(parts, step)
      if parts.actions.requested is not None and not parts.actions.stopped:
        parts.actions.end(step)  # A callback's stop at the last step.
    parts.checkpoints.save_final(step)
    try:  # A stop asked for during the export raises Preempted after it.
      finishing.export(
        model=parts.state.model,
        serving=self._task.serving,
        location=parts.outputs.export,
        step=step,
        trained=trained,
        progress=self._progress,
        fence=self._fence,
      )
      summary = _summary(parts, step, self._plan, self._started, self.ledger)
      finishing.write_summary(parts.outputs.model, summary, fence=self._fence)
    finally:
      parts.close()
    parts.checkpoints.remove_local()
    finishing.log_done(summary, model_dir=self._plan.place.dirs.model_dir)
    return summary


@contextlib.contextmanager
def _closed_on_user_error(parts):
  """Closes the run's parts (checkpoint writes finished, outputs released)
  when the block refuses the user's input, then lets the UserError out."""
  try:
    yield
  except UserError:
    parts.close()
    raise


def _evaluate(parts, step: int) -> None:
  """Evaluates at `step`; an evaluation callback that raises `StopTraining`
  asks to stop as a loop action does (ctl.train.actions)."""
  try:
    parts.evaluation.run(step)
  except actions_lib.StopTraining as stop:
    parts.actions.request(step, stop)


class _Loops:
  """The train loops to a target step and the duties between them.

  Each duty is its own unit of the run's parts, called at loop boundaries
  only: the metrics window and its log line, stragglers, evaluation, the
  user's actions, checkpoints and their policy, the divergence guard.
  """

  def __init__(
    self,
    parts,
    task,
    schedule: parts_lib.LoopSchedule,
    strategy,
    faults,
    progress,
    *,
    step,
    save_first,
    is_chief,
  ):
    self._parts = parts
    self._task = task
    self._schedule = schedule
    self._strategy = strategy
    self._faults = faults
    self._progress = progress
    self._is_chief = is_chief  # What the loop actions are told.
    # The global step as the host knows it: read from the variable after a
    # restore, then advanced by the steps each loop runs.
    self.step = step
    self._save_first = save_first  # Save this step after the first trace.
    # A stop that an action or an evaluation callback of any worker asked
    # for, agreed right after them (ctl.train.actions); with one worker, or
    # none of either, no exchange.
    self._any_worker = (
      worker_exchange.any_worker(strategy)
      if parts.actions or parts.evaluation.has_callbacks
      else bool
    )

  def until(self, train_steps: int, stop) -> None:
    """Runs train loops to `train_steps`, the duties between them."""
    parts, iterator = self._parts, self._iterator()
    returned, first = time.perf_counter(), True
    while self.step < train_steps:
      num_steps = min(self._schedule.steps_per_loop, train_steps - self.step)
      started = time.monotonic()
      phase = progress_lib.FIRST_LOOP if first else progress_lib.TRAIN_LOOP
      with (
        self._progress.phase(phase),
        parts.profiler.loop(
          first_step=self.step + 1, last_step=self.step + num_steps
        ),
      ):
        check_updates = self._trace_and_save_first(iterator) if first else None
        # Host time since the previous loop returned: what the others
        # wait for in this loop's all-reduce if this worker is the slowest.
        output = parts.loop.train(
          iterator,
          num_steps,
          stop_requested=stop.requested,
          save_requested=parts.checkpoints.due_by_time(),
          host_seconds=time.perf_counter() - returned,
        )
        returned = time.perf_counter()
        self.step += num_steps
      first = False
      if not np.all(np.isfinite(output.step_losses)):
        self._roll_back(output.step_losses)
        iterator = self._iterator()
        continue
      if check_updates:
        with _closed_on_user_error(parts):
          check_updates(num_steps)
      if output.stop_requested:
        self._record_loop(output, num_steps, time.monotonic() - started)
        parts.checkpoints.save(self.step)
        parts.close()
        raise Preempted(self.step, stop.signal)
      if self._after_loop(output, num_steps, time.monotonic() - started):
        return

  def _trace_and_save_first(self, iterator) -> Callable[[int], None]:
    """Traces the loop (a bad step or batch is refused here), then saves
    step 0 of a new run; returns the check of the first loop's updates
    (`step.update_check`), read now, called after the loop."""
    self._parts.loop.trace(iterator)
    if self._save_first:
      self._parts.checkpoints.save(self.step)
    return self._parts.loop.update_check()

  def _record_loop(self, output, num_steps: int, seconds: float) -> None:
    """The loop's metrics, stragglers and log line."""
    parts, step, schedule = self._parts, self.step, self._schedule
    parts.window.add(output, num_steps, seconds)
    parts.stragglers.add(output.host_seconds, step=step)
    if step % schedule.log_every_steps == 0 or step == schedule.train_steps:
      parts.window.log(step, parts.stragglers.scalars())

  def _after_loop(self, output, num_steps: int, seconds: float) -> bool:
    """The duties after a loop, in order: its log line, evaluation, the
    user's actions, then the checkpoint, which so holds what the actions
    decided or changed. Returns whether an action stopped the run."""
    parts, step = self._parts, self.step
    self._record_loop(output, num_steps, seconds)
    if parts.evaluation.due(step):
      _evaluate(parts, step)
    if parts.actions and parts.actions.requested is None:
      with self._progress.phase(progress_lib.LOOP_ACTIONS):
        parts.actions.after_loop(step, self._result(output))
    if self._any_worker(parts.actions.requested is not None):
      parts.actions.end(step)  # Every worker, at the step it was decided.
      return True
    parts.checkpoints.maybe_save(step, requested=output.save_requested)
    return False

  def _result(self, output) -> actions_lib.LoopResult:
    """What the loop actions are told of the loop that just ended."""
    evaluation = self._parts.evaluation
    metrics = self._parts.window.loop_metrics(output)
    return actions_lib.LoopResult(
      loss=metrics["loss"],
      metrics=metrics,
      eval_metrics=evaluation.metrics if evaluation.step == self.step else {},
      is_chief=self._is_chief,
    )

  def _iterator(self):
    seed = int(self._parts.state.data_seed.numpy())
    return _train_iterator(
      self._task, self._strategy, self.step, seed, self._faults
    )

  def _roll_back(self, losses: np.ndarray) -> None:
    """Returns to the last checkpoint after a non-finite loss."""
    try:
      self._parts.divergence.record(losses, last_step=self.step)
    except TrainingDiverged:
      self._parts.close()
      raise
    _, self.step = self._parts.checkpoints.restore_latest()
    if self._schedule.reshuffle_on_nan:
      self._parts.state.data_seed.assign_add(1)


def _observers(place, start, faults, listeners, *, current_step, fence):
  """(the run ledger, a fault injector, the progress that marks phases).

  The chief keeps the run ledger (ctl.telemetry.ledger), a listener of every
  mark; the other workers an `Unkept` one, which records nothing. Test
  machinery only when asked for: no injector, listener, hook or wrapper
  else; it listens after a watchdog (among `listeners`), so the watchdog sees
  the phase a fault stalls.
  """
  ledger = (
    ledger_lib.Ledger(
      directory=ledger_reader.ledger_dir(place.dirs.model_dir),
      storage=place.storage_route,
      fuse_root=place.fuse_root,
      restart=start.restarts,
      start_flags=start.start_flags,
      fence=fence,
    )
    if place.is_chief
    else ledger_lib.Unkept()
  )
  injector = (
    faults_lib.Injector(tuple(faults), record=ledger.record) if faults else None
  )
  progress = progress_lib.Progress(
    current_step=current_step,
    listeners=tuple(filter(None, (ledger, *listeners, injector))),
  )
  return ledger, injector, progress


def _train_iterator(task, strategy, step: int, seed: int, faults):
  """The distributed train data from `step` on (the position is the step)."""
  dataset_fn = lambda context: task.train_dataset_fn(context, step, seed)
  if faults:
    dataset_fn = faults.wrap_dataset_fn(dataset_fn, start_step=step)
  return iter(strategy.distribute_datasets_from_function(dataset_fn))


def _summary(
  parts: parts_lib.Parts,
  step: int,
  plan: _Plan,
  started: float,
  ledger: ledger_lib.Ledger | ledger_lib.Unkept,
) -> dict:
  """The run summary (`train_summary.json`) at `step`."""
  summary = {
    "final_step": step,
    **{
      f"train_{name}": parts.window.metrics.get(name)
      for name in ("loss", *parts.metric_names)
    },
    **{
      f"eval_{name}": parts.evaluation.metrics.get(name)
      for name in ("loss", *parts.metric_names)
    },
    "examples_per_second": parts.window.median_throughput(),
    "wall_seconds": round(time.monotonic() - started, 3),
    "restores": int(parts.state.restores.numpy()),
    "restarts": plan.start.restarts,
    "nan_recoveries": parts.divergence.recoveries,
    "weights_fingerprint": checkpointing.weights_fingerprint(
      parts.state.model, parts.state.optimizer
    ),
    **parts.checkpoints.summary(),
    **parts.actions.summary(),
    "data_order_differs_from_step": (
      parts.checkpoints.data_order_differs_from_step
    ),
  }
  if ledger.kept:
    summary["goodput"] = finishing.goodput(
      ledger.accounting(ending="done", step=step),
      step=step,
      writer=parts.writer,
      model_dir=plan.place.dirs.model_dir,
    )
  return summary
