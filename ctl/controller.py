"""The outer loop: bookkeeping between calls of the compiled train loop.

`run` restores the newest readable checkpoint, then repeatedly runs up to
`steps_per_loop` steps in one `tf.function` call and, at loop boundaries only,
logs, writes summaries, evaluates, checkpoints, rolls back a non-finite loss,
and stops when any worker was asked to (SIGTERM). At the end it evaluates,
saves, exports a SavedModel and writes `train_summary.json`.

Steps are targets: `train_steps=N` means "until the global step is N", so the
same call after any interruption continues and ends at the same place.
"""

from collections.abc import Callable, Sequence
import dataclasses
import json
import os
import time

from absl import logging
import numpy as np
import tensorflow as tf

from ctl import checkpointing
from ctl import export
from ctl import faults as faults_lib
from ctl import goodput
from ctl import ledger as ledger_lib
from ctl import loop as loop_lib
from ctl import outputs as outputs_lib
from ctl import preemption
from ctl import profiler
from ctl import progress as progress_lib
from ctl import state as state_lib
from ctl import stragglers as stragglers_lib
from ctl import summaries
from ctl import watchdog as watchdog_lib
from ctl.errors import Preempted
from ctl.errors import TrainingDiverged
from ctl.options import RunOptions
from ctl.options import Task


def run(
  *,
  task: Task,
  options: RunOptions,
  strategy: tf.distribute.Strategy,
  eval_callbacks: Sequence[Callable[[int, dict], None]] = (),
  progress_listeners: Sequence[progress_lib.Listener] = (),
  faults: Sequence[faults_lib.Fault] = (),
  watchdog: watchdog_lib.Watchdog | None = None,
) -> dict:
  """Trains to `options.train_steps`, resuming from the latest checkpoint.

  Args:
    task: what to train.
    options: how to train.
    strategy: the distribution strategy (one device, mirrored, multi-worker).
    eval_callbacks: called as `fn(step, eval_metrics)` after each evaluation
      (e.g. to report a hyperparameter-tuning metric).
    progress_listeners: called with every `ctl.progress.Mark` (each phase's
      start and end), after the controller's own listeners.
    faults: faults to inject (tests and benchmarks; see ctl.faults).
    watchdog: a started stall watchdog (ctl.watchdog), or None. It sees every
      phase first, and a stall it ends the process for is recorded in the
      run ledger.

  Returns:
    The summary also written to `<model_dir>/train_summary.json` (chief);
    `{"final_step": 0}` when train_steps is 0 and there is no checkpoint
    (nothing is trained or written).

  Raises:
    UserError: bad options or an incompatible checkpoint.
    Preempted: a stop was requested; the checkpoint at the agreed step was
      written before raising.
    TrainingDiverged: the loss stayed non-finite; nothing bad was saved.
  """
  options.validate()
  listeners = tuple(progress_listeners)
  if watchdog:
    listeners = (watchdog, *listeners)
  run_state = _Run(task, options, strategy, eval_callbacks, listeners, faults)
  if watchdog and run_state.ledger:
    watchdog.add_stall_callback(
      lambda stall: run_state.ledger.record(
        "stall", **dataclasses.asdict(stall)
      )
    )
  return run_state.run()


class _Run:
  """The state of one `run` call; split out so each phase reads on its own."""

  def __init__(
    self, task, options, strategy, eval_callbacks, progress_listeners, faults
  ):
    self._task = task
    self._options = options
    self._strategy = strategy
    self._eval_callbacks = eval_callbacks
    self._process_start = time.time()
    # The global step as the host knows it: read from the variable after a
    # restore, then advanced by the steps each loop runs, so bookkeeping and
    # progress marks never wait on a device-to-host copy.
    self._step = 0
    # The chief keeps the run ledger (ctl.ledger), a listener of every mark.
    self._ledger = options.is_chief and ledger_lib.Ledger(
      directory=ledger_lib.ledger_dir(options.dirs.model_dir),
      storage=options.storage,
      fuse_root=options.fuse_root,
    )
    # Test machinery only when asked for: no listener, hook or wrapper else.
    self._faults = faults_lib.Injector(tuple(faults)) if faults else None
    listeners = (*([self._ledger] if self._ledger else []), *progress_listeners)
    if self._faults:
      listeners += (self._faults,)  # After a watchdog: it sees the phase.
    self._progress = progress_lib.Progress(
      current_step=lambda: self._step, listeners=listeners
    )
    self._first_loop_done = False

  @property
  def ledger(self) -> ledger_lib.Ledger | None:
    """The run ledger (the chief's), or None on other workers."""
    return self._ledger or None

  def _build(self) -> None:
    """Opens the outputs and builds the model, optimizer and loops."""
    task, options, strategy = self._task, self._options, self._strategy
    self._outputs = outputs_lib.open_outputs(
      options.dirs,
      is_chief=options.is_chief,
      storage_route=options.storage,
      fuse_root=options.fuse_root,
    )
    self._state = state_lib.build_state(
      task=task, strategy=strategy, seed=options.seed
    )
    self._model, self._optimizer = self._state.model, self._state.optimizer
    self._global_step = self._state.global_step
    self._data_seed, self._restores = (
      self._state.data_seed,
      self._state.restores,
    )
    with strategy.scope():
      loss_hook = self._faults and self._faults.loss_hook()
    checkpoint = self._state.checkpoint()
    checkpoints = self._outputs.checkpoints
    checkpoints.fetch()
    self._checkpointer = checkpointing.Checkpointer(
      checkpoint=checkpoint,
      directory=checkpoints.local_path,
      is_chief=options.is_chief,
      keep=options.keep_checkpoints,
      async_save=options.async_checkpoint,
      on_saved=lambda: self._upload(checkpoints),
    )
    self._loop = loop_lib.TrainLoop(
      strategy=strategy,
      model=self._model,
      optimizer=self._optimizer,
      global_step=self._global_step,
      global_batch_size=task.global_batch_size,
      steps_per_loop=options.steps_per_loop,
      loss_fn=task.loss_fn,
      jit_compile=options.xla,
      train_accuracy=options.train_accuracy,
      loss_hook=loss_hook,
    )
    self._eval_loop = loop_lib.EvalLoop(
      strategy=strategy, model=self._model, loss_fn=task.loss_fn
    )
    self._writer = summaries.ScalarWriter(
      logdir=self._outputs.tensorboard and self._outputs.tensorboard.local_path
    )
    self._profiler = profiler.StepProfiler(
      steps=options.profile_steps, logdir=self._writer.run_dir(summaries.TRAIN)
    )
    self._eval_data = (
      strategy.distribute_datasets_from_function(task.eval_dataset_fn)
      if task.eval_dataset_fn
      else None
    )
    self._divergence = DivergenceGuard(
      max_recoveries=options.max_nan_recoveries
    )
    self._last_save_step = None
    self._last_save_time = time.time()
    self._every_secs, self._every_why = None, None
    self._eval_metrics = {}
    self._train_metrics = {}
    self._window = _Window()
    self._throughput = []
    self._stragglers = stragglers_lib.Detector()
    self._straggler = None

  def _iterator(self):
    step, seed = self._step, int(self._data_seed.numpy())
    dataset_fn = lambda context: self._task.train_dataset_fn(
      context, step, seed
    )
    if self._faults:
      dataset_fn = self._faults.wrap_dataset_fn(dataset_fn, start_step=step)
    return iter(self._strategy.distribute_datasets_from_function(dataset_fn))

  def _restore_latest(self) -> str | None:
    path = self._checkpointer.restore_latest()
    self._step = int(self._global_step.numpy())
    return path

  def _restore(self) -> bool:
    """Restores the latest checkpoint; False when there is none."""
    path = self._restore_latest()
    if path is None:
      if not self._options.train_steps:
        return False
      logging.info(
        "No checkpoint in %s; starting at step 0.",
        self._options.dirs.checkpoint_dir,
      )
      # A rollback target for the divergence guard, and a fixed start.
      if self._options.max_nan_recoveries:
        self._save()
      return False
    self._restores.assign_add(1)
    self._last_save_step = self._step
    logging.info("Restored step %d from %s.", self._step, path)
    return True

  def _upload(self, checkpoints) -> None:
    if not checkpoints.mirrored:
      return
    with self._progress.phase(progress_lib.CHECKPOINT_UPLOAD):
      checkpoints.publish(commit_file="checkpoint")

  def _save(self) -> None:
    with self._progress.phase(progress_lib.CHECKPOINT_SAVE):
      self._checkpointer.save(self._step)
    self._last_save_step = self._step
    self._last_save_time = time.time()
    self._choose_interval()

  def _choose_interval(self) -> None:
    """Sets the time-based checkpoint interval (None: none)."""
    every = self._options.checkpoint_every_secs
    if every != "auto":
      self._every_secs = float(every) or None
      return
    seconds, why = goodput.checkpoint_interval(
      self._ledger and self._ledger.accounting(),
      expected_mtbf_secs=self._options.expected_mtbf_secs,
    )
    previous = self._every_secs
    if previous is None or abs(seconds - previous) > 0.1 * previous:
      logging.info(
        "checkpoint_every_secs=auto: every %.0f s: %s.", seconds, why
      )
    self._every_secs, self._every_why = seconds, why

  def run(self) -> dict:
    with self._progress.phase(progress_lib.RUN):
      return self.train()

  def train(self) -> dict:
    options = self._options
    with self._progress.phase(progress_lib.STARTUP):
      self._build()
      with self._progress.phase(progress_lib.RESTORE):
        restored = self._restore()
      if not restored and not options.train_steps:
        # Nothing to train: an untrained export or checkpoint helps no one.
        logging.info(
          "train_steps is 0 and %s holds no checkpoint: nothing to "
          "train, nothing written.",
          options.dirs.checkpoint_dir,
        )
        if self._ledger:
          self._ledger.discard()
        self._close()
        return {"final_step": 0}
      self._writer.write_hparams(options.hparams)
    self._choose_interval()
    start_step = self._step
    if start_step >= options.train_steps:
      logging.info(
        "Step %d reaches --train_steps=%d: nothing to train.",
        start_step,
        options.train_steps,
      )
    iterator = self._iterator()
    returned = time.perf_counter()
    with preemption.StopRequest() as stop:
      while self._step < options.train_steps:
        num_steps = min(
          options.steps_per_loop, options.train_steps - self._step
        )
        started = time.time()
        phase = (
          progress_lib.TRAIN_LOOP
          if self._first_loop_done
          else progress_lib.FIRST_LOOP
        )
        with (
          self._progress.phase(phase),
          self._profiler.loop(
            first_step=self._step + 1, last_step=self._step + num_steps
          ),
        ):
          # Host time since the previous loop returned: what the others
          # wait for in this loop's all-reduce if this worker is the slowest.
          output = self._loop.train(
            iterator,
            num_steps,
            stop_requested=stop.requested,
            save_requested=self._save_due(),
            host_seconds=time.perf_counter() - returned,
          )
          returned = time.perf_counter()
          self._step += num_steps
        self._first_loop_done = True
        seconds = time.time() - started
        if not np.all(np.isfinite(output.step_losses)):
          self._roll_back(output.step_losses)
          iterator = self._iterator()
          continue
        self._after_loop(output, num_steps, seconds)
        if output.stop_requested:
          self._save()
          self._close()
          raise Preempted(self._step, stop.signal)
    return self._finish(trained=self._step > start_step)

  def _save_due(self) -> bool:
    every = self._every_secs
    return bool(
      self._options.is_chief
      and every is not None
      and time.time() - self._last_save_time >= every
    )

  def _roll_back(self, losses: np.ndarray) -> None:
    """Returns to the last checkpoint after a non-finite loss."""
    try:
      self._divergence.record(losses, last_step=self._step)
    except TrainingDiverged:
      self._close()
      raise
    self._restore_latest()
    if self._options.reshuffle_on_nan:
      self._data_seed.assign_add(1)

  def _after_loop(self, output, num_steps: int, seconds: float) -> None:
    options = self._options
    step = self._step
    self._window.add(output, num_steps, seconds)
    if options.is_chief:
      self._check_stragglers(output.host_seconds, step)
    if step % options.log_every_steps == 0 or step == options.train_steps:
      self._log(step)
    if (
      options.eval_every_steps
      and step % options.eval_every_steps == 0
      and step < options.train_steps
    ):
      self._evaluate(step)
    if (
      (
        options.checkpoint_every_steps
        and step % options.checkpoint_every_steps == 0
      )
      or output.save_requested
    ) and step < options.train_steps:
      self._save()

  def _check_stragglers(self, host_seconds: np.ndarray, step: int) -> None:
    """Logs when a worker starts or stops straggling (ctl.stragglers)."""
    straggler = self._stragglers.add(host_seconds)
    before = self._straggler
    self._straggler = straggler
    if straggler and (not before or before.worker != straggler.worker):
      logging.warning(
        "straggler: worker %d is the slowest at step %d: %.3f s of host "
        "time per loop, %.1fx the median %.3f s (seconds by worker: %s); "
        "the others wait for it in every all-reduce.",
        straggler.worker,
        step,
        straggler.seconds,
        straggler.ratio,
        straggler.median_seconds,
        " ".join(f"{s:.3f}" for s in host_seconds),
      )
    elif before and not straggler:
      logging.info(
        "straggler: worker %d no longer straggles at step %d.",
        before.worker,
        step,
      )

  def _log(self, step: int) -> None:
    window = self._window
    steps_per_second = window.steps / max(window.seconds, 1e-9)
    examples_per_second = steps_per_second * self._task.global_batch_size
    self._throughput.append(examples_per_second)
    remaining = (self._options.train_steps - step) / max(steps_per_second, 1e-9)
    self._train_metrics = {"loss": window.mean_loss}
    accuracy = ""
    if window.accuracy is not None:
      self._train_metrics["accuracy"] = window.accuracy
      accuracy = f"  accuracy {window.accuracy:.4f}"
    logging.info(
      "step %d/%d  loss %.4f%s  %.1f examples/s  ETA %s",
      step,
      self._options.train_steps,
      window.mean_loss,
      accuracy,
      examples_per_second,
      time.strftime("%H:%M:%S", time.gmtime(remaining)),
    )
    self._writer.write(
      step,
      {
        **self._train_metrics,
        "learning_rate": float(
          tf.convert_to_tensor(self._optimizer.learning_rate)
        ),
        "examples_per_second": examples_per_second,
        "steps_per_second": steps_per_second,
        **(
          {
            "straggler/ratio": self._straggler.ratio,
            "straggler/worker": self._straggler.worker,
          }
          if self._straggler
          else {}
        ),
      },
      run=summaries.TRAIN,
    )
    self._publish(self._outputs.tensorboard)
    self._window = _Window()

  def _evaluate(self, step: int) -> None:
    if self._eval_data is None:
      return
    with self._progress.phase(progress_lib.EVALUATION):
      metrics = self._eval_loop.evaluate(self._eval_data)
    if not metrics["examples"]:
      logging.warning(
        "eval at step %d: the validation data holds no examples: no "
        "evaluation (nothing written or reported).",
        step,
      )
      return
    self._eval_metrics = metrics
    logging.info(
      "eval at step %d: loss %.4f  accuracy %.4f  (%d examples)",
      step,
      metrics["loss"],
      metrics["accuracy"],
      metrics["examples"],
    )
    if not self._options.evaluator_writes_validation:
      self._writer.write(
        step,
        {"loss": metrics["loss"], "accuracy": metrics["accuracy"]},
        run=summaries.VALIDATION,
      )
      self._publish(self._outputs.tensorboard)
    for callback in self._eval_callbacks:
      callback(step, metrics)

  def _finish(self, *, trained: bool) -> dict:
    options = self._options
    step = self._step
    self._evaluate(step)
    if self._last_save_step != step:
      self._save()
    location = self._outputs.export
    if trained or export.exported_step(location) != step:
      # A stop asked for during the export lets it commit, then stops.
      with (
        preemption.StopRequest() as stop,
        self._progress.phase(progress_lib.EXPORT),
      ):
        export.export_saved_model(
          model=self._model,
          image_shape=self._task.image_shape,
          location=location,
          step=step,
        )
      if stop.requested:
        self._close()
        raise Preempted(step, stop.signal)
    summary = {
      "final_step": step,
      "train_loss": self._train_metrics.get("loss"),
      "train_accuracy": self._train_metrics.get("accuracy"),
      "eval_loss": self._eval_metrics.get("loss"),
      "eval_accuracy": self._eval_metrics.get("accuracy"),
      "examples_per_second": (
        float(np.median(self._throughput[1:] or self._throughput))
        if self._throughput
        else None
      ),
      "wall_seconds": round(time.time() - self._process_start, 3),
      "restores": int(self._restores.numpy()),
      "restarts": options.restarts,
      "nan_recoveries": self._divergence.recoveries,
      "weights_fingerprint": checkpointing.weights_fingerprint(
        self._model, self._optimizer
      ),
    }
    if self._every_why:
      summary["checkpoint_every_secs"] = {
        "seconds": self._every_secs,
        "why": self._every_why,
      }
    if self._ledger:
      accounting = self._ledger.accounting()
      summary["goodput"] = accounting.summary()
      self._writer.write(step, {"goodput/percent": accounting.goodput_percent})
      logging.info(
        "Goodput %.1f%% of %.1f s over %d start(s) (ctl-report %s "
        "shows where the rest went).",
        accounting.goodput_percent,
        accounting.total_seconds,
        len(accounting.attempts),
        options.dirs.model_dir,
      )
    if self._outputs.model:
      model_dir = self._outputs.model.local_path
      tf.io.gfile.makedirs(model_dir)
      with tf.io.gfile.GFile(
        os.path.join(model_dir, "train_summary.json"), "w"
      ) as f:
        json.dump(summary, f, indent=2)
    self._close()
    accuracy = summary["eval_accuracy"]
    logging.info(
      "Done at step %d: eval accuracy %s, weights fingerprint %s; summary "
      "in %s.",
      step,
      "n/a" if accuracy is None else f"{accuracy:.4f}",
      summary["weights_fingerprint"][:16],
      os.path.join(options.dirs.model_dir, "train_summary.json"),
    )
    return summary

  def _publish(self, location) -> None:
    if location:
      location.publish()

  def _close(self) -> None:
    """Finishes checkpoint writes, then publishes and releases outputs."""
    self._checkpointer.close()
    self._profiler.stop()
    self._writer.close()
    self._outputs.close()


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


class _Window:
  """Running totals between two log lines."""

  def __init__(self):
    self.steps = 0
    self.seconds = 0.0
    self.loss_sum = 0.0
    self.correct_fraction_sum = None  # None: the loop counts no accuracy.

  def add(
    self, output: loop_lib.LoopOutput, num_steps: int, seconds: float
  ) -> None:
    self.steps += num_steps
    self.seconds += seconds
    self.loss_sum += float(np.sum(output.step_losses))
    if output.accuracy is not None:
      self.correct_fraction_sum = (self.correct_fraction_sum or 0.0) + (
        output.accuracy * num_steps
      )

  @property
  def mean_loss(self) -> float:
    return self.loss_sum / max(self.steps, 1)

  @property
  def accuracy(self) -> float | None:
    if self.correct_fraction_sum is None:
      return None
    return self.correct_fraction_sum / max(self.steps, 1)
