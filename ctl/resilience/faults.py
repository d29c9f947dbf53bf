"""Fault injection for tests and benchmarks: one switch, nothing when off.

A fault is written `KIND@STEP[:OPTION]...`; several are joined by commas:

  nan@23                        the loss of global step 23 is NaN (once)
  nan@*                         every step's loss is NaN
  stall@40:input:worker=1       worker 1's input pipeline blocks forever at
                                the batch of step 40
  stall@40:secs=30              the host blocks 30 s at the first train loop
                                that starts at or after step 40
  stall@20:checkpoint_upload    blocks forever when an upload starts at or
                                after step 20
  crash@40:attempt=0            SIGKILL itself at step 40, in the first run
                                only (the launcher's `CTL_RESTART_COUNT`)
  slow@*:secs=0.05:worker=1     every train loop of worker 1 starts 50 ms late

Options: `input` (the worker's tf.data pipeline), `loop` (the default: a
train-loop boundary) or a phase of `ctl.telemetry.progress` says where a host fault
fires; `secs=S` makes a stall end after S seconds (forever otherwise) and is
the delay of `slow`; `worker=N` and `attempt=N` restrict a fault to one worker
(TF_CONFIG task index) or one restart of the job.

The faults are the environment variable `CTL_FAULTS`, read by the trainer
(`from_environ`), so one setting reaches every worker a launcher starts and no
test machinery appears in flags or `RunOptions`. They act only with a second
switch, `CTL_FAULTS_ENABLED=1`, which tests and benchmarks set
(`ctl.env.faults_environment`): a `CTL_FAULTS` left in a shell or a container
spec is ignored with one warning, never breaking a real job.
`ctl.train.controller.run` takes the parsed faults; with none, nothing of this
module runs: the compiled step holds no fault op and no progress listener is
added. Every fault that fires says so: a `fault:` line in the log and a
`fault` event in the run ledger.

Host faults fire from a progress listener at the start of the phase they name
(a stall there is seen by the watchdog as a stall of that phase); an input
fault is a `tf.py_function` appended to the worker's train dataset; a NaN
fault replaces the loss inside the step, where a rollback can see it.
"""

from collections.abc import Callable, Mapping
import dataclasses
import os
import signal
import sys
import threading
import time

from absl import logging
import numpy as np
import tensorflow as tf

from ctl import env
from ctl.errors import UserError
from ctl.telemetry import progress

KINDS = ("nan", "stall", "crash", "slow")
INPUT = "input"
LOOP = "loop"  # FIRST_LOOP or TRAIN_LOOP.
_PLACES = (INPUT, LOOP, *progress.PHASES)
_LOOPS = (progress.FIRST_LOOP, progress.TRAIN_LOOP)
_NEVER = np.iinfo(np.int64).max  # No global step reaches it.
_EVERY_STEP = -1


@dataclasses.dataclass(frozen=True)
class Fault:
  """One fault to inject.

  Attributes:
    kind: one of KINDS.
    step: the global step it fires at; None for every step (`*`).
    where: INPUT, LOOP or a phase of `ctl.telemetry.progress` (host faults); "step"
      for NaN, which is always in the step.
    secs: how long a stall lasts (None: forever) or the delay of `slow`.
    worker: only this worker (TF_CONFIG task index); None: every worker.
    attempt: only this restart of the job; None: every one.
  """

  kind: str
  step: int | None
  where: str = LOOP
  secs: float | None = None
  worker: int | None = None
  attempt: int | None = None


def parse(spec: str) -> tuple[Fault, ...]:
  """Parses a `CTL_FAULTS` value (see the module docstring).

  Raises:
    UserError: for a malformed fault, in one sentence.
  """
  return tuple(
    _parse_one(text.strip()) for text in spec.split(",") if text.strip()
  )


def from_environ(
  environ: Mapping[str, str] = os.environ, *, worker: int, attempt: int
) -> tuple[Fault, ...]:
  """The faults in `CTL_FAULTS` that apply to this worker and attempt.

  None unless `CTL_FAULTS_ENABLED=1` allows them: a `CTL_FAULTS` without it
  is ignored, with one warning line.
  """
  spec = env.faults(environ)
  if spec and not env.faults_enabled(environ):
    logging.warning(
      "%s=%s is ignored: fault injection is for tests and benchmarks, which"
      " also set %s=1.",
      env.FAULTS,
      spec,
      env.FAULTS_ENABLED,
    )
    return ()
  return tuple(
    f
    for f in parse(spec)
    if f.worker in (None, worker) and f.attempt in (None, attempt)
  )


def _parse_one(text: str) -> Fault:
  def bad(why):
    return UserError(
      f"{env.FAULTS} fault {text!r} {why}; expected "
      "KIND@STEP[:OPTION]..., e.g. stall@40:input:worker=1."
    )

  head, *options = text.split(":")
  kind, _, step_text = head.partition("@")
  if kind not in KINDS:
    raise bad(f"has unknown kind {kind!r} (one of {', '.join(KINDS)})")
  if step_text != "*" and not step_text.isdigit():
    raise bad("needs a step number or * after @")
  fields = dict(kind=kind, step=None if step_text == "*" else int(step_text))
  for option in options:
    name, _, value = option.partition("=")
    try:
      if option in _PLACES:
        fields["where"] = option
      elif name == "secs":
        fields["secs"] = float(value)
      elif name in ("worker", "attempt"):
        fields[name] = int(value)
      else:
        raise bad(f"has unknown option {option!r}")
    except ValueError:
      raise bad(f"has a bad number in {option!r}") from None
  if kind == "nan":
    if set(fields) - {"kind", "step", "worker", "attempt"}:
      raise bad(
        "is a NaN loss, which happens in the step: it takes no place or secs"
      )
    fields["where"] = "step"
  if kind == "slow" and fields.get("secs") is None:
    raise bad("needs secs=S, the delay")
  return Fault(**fields)


class Injector:
  """Fires the faults of one `ctl.train.controller.run` call.

  A progress listener (host faults), a dataset wrapper (input faults) and a
  loss hook for the compiled step (NaN faults). A fault with a step fires
  once per process; one with `*` fires every time.
  """

  def __init__(
    self,
    faults: tuple[Fault, ...],
    *,
    record: Callable[..., None] | None = None,
  ):
    """Arms `faults`.

    Args:
      faults: the faults of this worker and attempt.
      record: `record(kind, **fields)` of the run ledger (the chief's), told
        of every fault that fires; None: the log line only.

    Raises:
      UserError: for more than one NaN fault.
    """
    self._record = record
    self._host = [f for f in faults if f.where not in (INPUT, "step")]
    self._input = [f for f in faults if f.where == INPUT]
    self._nan = [f for f in faults if f.kind == "nan"]
    if len(self._nan) > 1:
      raise UserError(
        f"{env.FAULTS} has {len(self._nan)} NaN faults for this "
        "worker; one at a time is supported."
      )
    self._fired = set()
    self._announced = set()
    self._nan_target = None

  def loss_hook(self) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None:
    """`(loss, global_step) -> loss` for the step; None without NaN faults.

    Creates a variable: call it where the model's variables are created.
    """
    if not self._nan:
      return None
    fault = self._nan[0]
    self._nan_target = tf.Variable(
      _EVERY_STEP if fault.step is None else fault.step,
      dtype=tf.int64,
      trainable=False,
      name="fault_nan_step",
      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )
    target = self._nan_target

    def hook(loss, global_step):
      fire = tf.logical_or(
        tf.equal(target, _EVERY_STEP), tf.equal(global_step, target)
      )
      return tf.where(fire, tf.constant(np.nan, loss.dtype), loss)

    return hook

  def wrap_dataset_fn(
    self, dataset_fn: Callable, *, start_step: int
  ) -> Callable:
    """Adds the input faults to `dataset_fn(input_context)`'s dataset."""
    if not self._input:
      return dataset_fn

    def wrapped(context):
      per_pipeline = max(
        1, context.num_replicas_in_sync // context.num_input_pipelines
      )

      def element(index, batch):
        step = start_step + index // per_pipeline
        done = tf.py_function(self._at_input_step, [step], tf.int64)
        with tf.control_dependencies([done]):
          return tf.nest.map_structure(tf.identity, batch)

      return dataset_fn(context).enumerate().map(element)

    return wrapped

  def __call__(self, mark: progress.Mark) -> None:
    """The progress listener: fires host faults; ends a NaN fault's turn."""
    if not mark.started:
      if self._nan_target is not None and mark.phase in _LOOPS:
        self._end_nan(mark.step)
      return
    for fault in self._host:
      if fault.where in (mark.phase, LOOP if mark.phase in _LOOPS else None):
        if fault.step is None or (
          mark.step >= fault.step and fault not in self._fired
        ):
          self._fire(fault, mark)

  def _at_input_step(self, step) -> int:
    step = int(step)
    for fault in self._input:
      if fault.step is None or (
        step == fault.step and fault not in self._fired
      ):
        self._fire(
          fault, progress.Mark(phase=INPUT, step=step, time=time.time())
        )
    return step

  def _end_nan(self, step: int) -> None:
    """A NaN at step S fires once: disarmed once a loop has run past S."""
    fault = self._nan[0]
    if fault.step is None:  # Every step: said once, at the first loop's end.
      self._announce(fault, "the step", step)
    elif step > fault.step and (fault not in self._fired):
      self._fired.add(fault)
      self._nan_target.assign(_NEVER)
      self._announce(fault, "the step", fault.step)

  def _fire(self, fault: Fault, mark: progress.Mark) -> None:
    self._fired.add(fault)
    self._announce(fault, mark.phase, mark.step)
    if fault.kind == "crash":
      os.kill(os.getpid(), signal.SIGKILL)
    elif fault.kind == "stall" and fault.secs is None:
      threading.Event().wait()  # Forever, like a read that never returns.
    else:
      time.sleep(fault.secs or 0)

  def _announce(self, fault: Fault, where: str, step: int) -> None:
    """Says in the log and the ledger that `fault` fires; `*` faults once."""
    if fault in self._announced:
      return
    self._announced.add(fault)
    secs = "" if fault.secs is None else f" ({fault.secs:g} s)"
    print(
      f"fault: injecting {fault.kind} in {where} at step {step}{secs}",
      file=sys.stderr,
      flush=True,
    )
    if self._record:  # Written at once: a crash follows.
      self._record(
        "fault", fault=fault.kind, where=where, at_step=step, secs=fault.secs
      )
