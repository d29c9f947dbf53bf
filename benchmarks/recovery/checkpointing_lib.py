"""Checkpointing: save and restore time, and what saving costs training.

Cloud Storage here is gcp-storage-emulator (from PyPI) on loopback, storing
objects on local disk, reached through gcsfs exactly as a job reaches a real
bucket (`STORAGE_EMULATOR_HOST`). Two sections:

`checkpointing`: checkpoint I/O of the trainer's ResNet50 (model and Adam
  state, as the trainer saves them), on local disk and on gs:// through
  gcsfs, with the framework's own code: a `ctl.checkpoint.checkpointing.Checkpointer`
  saving into a `ctl.io.storage` location that `publish(commit_file=
  "checkpoint")` uploads after each save (as the controller does), and, to
  restore, a fresh location's `fetch()` followed by `restore_latest()`.

`checkpointing_training`: the trainer's command line (`python -m
  trainer.task`, small_cnn on the digits) with no checkpoints, synchronous
  saves and `--async_checkpoint` saves every K steps on local disk, and
  synchronous saves to gs:// (async to gs:// on request). Round r trains
  from step r*N to (r+1)*N in the same directory, so round 0 starts fresh
  and every later round resumes from the previous one's last checkpoint
  (read back from the bucket for gs://, each run with a fresh TMPDIR, i.e.
  no local staging). Per run it reads the trainer's progress events
  (`CTL_EVENTS`, never its log wording): throughput between the ends of
  the first and the last train loop at a logged step (the saves in between
  included), how long each save blocked training, and the time from
  process start to the first such loop end (fresh vs resumed).

Variants run interleaved, A B C A B C ..., so machine noise hits them alike;
the report gives medians with min-max over rounds, and ratios as the median
of per-round ratios.

The emulator is `ctl.testing.gcs_emulator`, the one the tests use. The app
is `benchmarks/recovery/checkpointing.py`.
"""

from collections.abc import Callable, Sequence
import dataclasses
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from absl import logging
import keras
import tensorflow as tf

from benchmarks.harness import budget as budget_lib
from benchmarks.harness import device as device_lib
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings
from benchmarks.harness import stats
from ctl.checkpoint import checkpointing
from ctl.errors import UserError
from ctl.io import storage
from ctl.telemetry import progress as progress_lib
from ctl.testing import events as events_lib
from ctl.testing import gcs_emulator
from trainer import model as model_lib
from trainer import testing as trainer_testing

BUCKET = "ctl-bench"


@dataclasses.dataclass(frozen=True)
class Variant:
  """One way to train in the training-cost section.

  Attributes:
    key: its name in --cost_variants.
    label: its row name in the report.
    route: "local" (a local model_dir) or "gcsfs" (gs:// through gcsfs).
    flags: trainer flags on top of the common ones.
  """

  key: str
  label: str
  route: str
  flags: tuple[str, ...] = ()


VARIANTS = (
  Variant("none", "no checkpoints", "local", ("--checkpoint_every_steps=0",)),
  Variant("local", "sync, local disk", "local"),
  Variant("local_async", "async, local disk", "local", ("--async_checkpoint",)),
  Variant("gcsfs", "sync, gs:// (gcsfs)", "gcsfs"),
  Variant(
    "gcsfs_async", "async, gs:// (gcsfs)", "gcsfs", ("--async_checkpoint",)
  ),
)
_BY_KEY = {variant.key: variant for variant in VARIANTS}
# What `make bench` runs (gcsfs_async adds about a minute).
DEFAULT_VARIANTS = ("none", "local", "local_async", "gcsfs")
# (numerator, denominator) throughput ratios, reported when both ran.
RATIOS = (
  ("local", "none"),
  ("local_async", "none"),
  ("gcsfs", "none"),
  ("gcsfs_async", "none"),
  ("local_async", "local"),
  ("gcsfs", "local"),
  ("gcsfs_async", "gcsfs"),
)


@dataclasses.dataclass(frozen=True)
class Config(settings.Rounds):
  """One checkpointing benchmark run.

  Its `settings.flag` fields are the flags of `checkpointing.py`: those of
  the training-cost section prefixed cost_, the others named as the field.
  """

  io_model: str = settings.flag(
    "resnet50",
    "The trainer's model whose checkpoint save/restore is timed.",
    choices=("resnet50", "small_cnn"),
    name="io_model",
  )
  io_image_size: int = settings.flag(
    224, "Input side of --io_model.", name="io_image_size"
  )
  io_num_classes: int = 5  # Cassava's.
  model: str = settings.flag(
    "small_cnn",
    "Trainer --model for the training-cost runs.",
    choices=("resnet50", "small_cnn"),
  )
  image_size: int = settings.flag(16, "Trainer --image_size.")
  batch_size: int = settings.flag(32, "Trainer --per_replica_batch_size.")
  train_steps: int = settings.flag(240, "Steps each round trains.")
  checkpoint_every: int = settings.flag(
    20, "Trainer --checkpoint_every_steps and --log_every_steps."
  )
  steps_per_loop: int = settings.flag(10, "Trainer --steps_per_loop.")
  variants: tuple[str, ...] = settings.flag(
    DEFAULT_VARIANTS,
    "Training variants to run, the first being the baseline of "
    "the cost column; from " + ", ".join(v.key for v in VARIANTS) + ".",
  )
  trainer_timeout_secs: int = settings.flag(
    180, "Limit for one trainer run.", name="trainer_timeout_secs"
  )
  device: str = "auto"
  section: str = "checkpointing"

  def validate(self) -> None:
    unknown = set(self.variants) - _BY_KEY.keys()
    if unknown or not self.variants:
      raise UserError(
        f"Unknown or no variants {sorted(unknown)}; choose "
        f"from {sorted(_BY_KEY)}."
      )
    if self.repeats < 1:
      raise UserError("repeats must be >= 1.")
    if (
      self.checkpoint_every % self.steps_per_loop
      or self.train_steps % self.checkpoint_every
      or self.train_steps < 2 * self.checkpoint_every
    ):
      raise UserError(
        "cost_checkpoint_every must be a multiple of cost_steps_per_loop, "
        "and cost_train_steps a multiple of it, at least twice."
      )


def run(config: Config, progress: Callable[[dict], None] | None = None) -> dict:
  """Runs both measurements.

  Args:
    config: what to run.
    progress: called with the sections so far (unfinished ones with status
      "partial") after the checkpoint I/O and after each training round but
      the last, so a run stopped at a time limit keeps what it measured.

  With `config.time_budget_secs`, the checkpoint I/O rounds and then the
  training rounds after the first are cut to those that fit it at their
  first round's pace (never below 1; a round's steps are not cut: each round
  resumes where the previous one ended).

  Returns:
    {config.section: checkpoint I/O, config.section + "_training": cost}.

  Raises:
    UserError: a bad configuration.
    RuntimeError: the emulator or a trainer run failed.
  """
  config.validate()
  training = f"{config.section}_training"
  report = progress or (lambda sections: None)
  budget = budget_lib.Budget(config.time_budget_secs)
  with (
    tempfile.TemporaryDirectory(prefix="ctl_bench_ckpt_") as workdir,
    gcs_emulator.serve(
      data_dir=os.path.join(workdir, "emulator"), bucket=BUCKET
    ) as emulator,
  ):
    io = io_section(
      config,
      *measure_checkpoint_io(config, os.path.join(workdir, "io"), budget),
    )
    report({config.section: io, training: _no_round_yet(training)})
    runs = measure_training(
      config,
      os.path.join(workdir, "train"),
      endpoint=emulator.endpoint,
      budget=budget,
      after_round=lambda runs: report(
        {
          config.section: io,
          training: training_section(config, runs, status="partial"),
        }
      ),
    )
  return {
    config.section: budget.stamp(io),
    training: budget.stamp(training_section(config, runs)),
  }


def _no_round_yet(training: str) -> dict:
  """The training section before its first round has finished."""
  return report_lib.placeholder(
    title=training, status="partial", note="No training round had finished."
  )


# --- Checkpoint I/O ----------------------------------------------------------


def model_checkpoint(
  *, model: str, image_size: int, num_classes: int, device: str
) -> tuple[tf.train.Checkpoint, device_lib.Device]:
  """The trainer's `model` and a built Adam as one checkpoint (what the
  trainer saves), made on `device` ("auto", "cpu", "gpu"); and that device."""
  resolved = device_lib.resolve(device)
  with tf.device(resolved.name):
    built = model_lib.build_model(
      name=model,
      num_classes=num_classes,
      image_shape=(image_size, image_size, 3),
    )
    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(built.trainable_variables)
  return tf.train.Checkpoint(model=built, optimizer=optimizer), resolved


def measure_checkpoint_io(
  config: Config, workdir: str, budget: budget_lib.Budget
) -> tuple[dict, float, str]:
  """Times saves and restores of the model's checkpoint, local vs gcsfs.

  Runs inside `gcs_emulator.serve()`, whose bucket BUCKET the gs:// saves
  use.

  Returns:
    ({measurement: [seconds per round]}, checkpoint size in MB, device).
  """
  checkpoint, device = model_checkpoint(
    model=config.io_model,
    image_size=config.io_image_size,
    num_classes=config.io_num_classes,
    device=config.device,
  )
  times, megabytes = {}, 0.0
  rounds, round_index = config.repeats, 0
  while round_index < rounds:
    round_dir = os.path.join(workdir, str(round_index))
    start = time.perf_counter()
    measured, megabytes = _io_round(checkpoint, round_dir, step=round_index)
    if round_index == 0:
      rounds = budget.rounds(
        time.perf_counter() - start, rounds, what="checkpoint I/O rounds"
      )
    round_index += 1
    shutil.rmtree(round_dir)
    for key, seconds in measured.items():
      times.setdefault(key, []).append(seconds)
    logging.info(
      "checkpoint I/O round %d of %d: %s",
      round_index,
      rounds,
      {k: round(v, 3) for k, v in measured.items()},
    )
  return times, megabytes, device.description


def _io_round(
  checkpoint: tf.train.Checkpoint, round_dir: str, *, step: int
) -> tuple[dict[str, float], float]:
  """One round of saves and restores; returns (seconds, size in MB)."""
  seconds = {}
  local_dir = os.path.join(round_dir, "local")
  saver = checkpointing.Checkpointer(
    checkpoint=checkpoint, directory=local_dir, is_chief=True, keep=1
  )
  seconds["save_local"] = _timed(saver.save, step)

  url = f"gs://{BUCKET}/io/ckpt{step}"
  location = storage.open_location(
    url, storage="gcsfs", staging_dir=os.path.join(round_dir, "staging")
  )

  def publish():  # What the controller passes as on_saved, timed.
    seconds["upload"] = _timed(location.publish, commit_file="checkpoint")

  saver = checkpointing.Checkpointer(
    checkpoint=checkpoint,
    directory=location.local_path,
    is_chief=True,
    keep=1,
    on_saved=publish,
  )
  seconds["save_gcsfs"] = _timed(saver.save, step)
  location.close()

  seconds["restore_local"] = _timed(
    checkpointing.Checkpointer(
      checkpoint=checkpoint, directory=local_dir, is_chief=True, keep=1
    ).restore_latest
  )
  # A fresh, private staging directory: everything comes from the bucket.
  reader = storage.open_location(url, storage="gcsfs", read_only=True)
  seconds["download"] = _timed(reader.fetch)
  seconds["restore_gcsfs"] = seconds["download"] + _timed(
    checkpointing.Checkpointer(
      checkpoint=checkpoint, directory=reader.local_path, is_chief=True, keep=1
    ).restore_latest
  )
  reader.close()
  return seconds, _megabytes(local_dir)


def io_section(
  config: Config, times: dict, megabytes: float, device: str
) -> dict:
  """The checkpoint I/O section from `measure_checkpoint_io`'s numbers."""
  ratios = [
    stats.ratio(
      name=f"{op} gs:// / {op} local (seconds)",
      numerator=f"{op}, gs:// (gcsfs)",
      numerator_values=times[f"{op}_gcsfs"],
      denominator=f"{op}, local disk",
      denominator_values=times[f"{op}_local"],
    )
    for op in ("save", "restore")
  ]
  size = config.io_image_size
  notes = [
    f"{config.io_model} {size}x{size} with {config.io_num_classes} classes "
    f"and its Adam state, as the trainer checkpoints it: {megabytes:.1f} MB "
    "per checkpoint (data and index files).",
    "save = Checkpointer.save until the checkpoint is committed (gs://: "
    "written to the staging directory, then uploaded data first and the "
    "state file last; transfer_seconds is the upload). restore = "
    "restore_latest (gs://: from a fresh staging directory after fetch(); "
    "transfer_seconds is the download).",
    "Cloud Storage is gcp-storage-emulator on loopback, a single-threaded "
    "Python server writing to local disk: its throughput, not a network "
    "link, bounds the gs:// numbers; a real bucket from a VM in its region "
    "differs. Local restores read the checkpoint just written, from the "
    "page cache: the best case.",
  ]
  return report_lib.section(
    title=(
      f"Checkpoint save and restore: {config.io_model} {size}x{size} "
      f"({megabytes:.3g} MB), local disk vs gs:// through gcsfs"
    ),
    rows=_io_rows(times, megabytes),
    ratios=ratios,
    notes=notes,
    chart_key="seconds",
    columns=["name", "seconds", "transfer_seconds", "megabytes_per_second"],
    config={
      "model": config.io_model,
      "image_size": size,
      "checkpoint_megabytes": megabytes,
      "repeats": config.repeats,
      "device": device,
    },
  )


def _io_rows(times: dict, megabytes: float) -> list[dict]:
  """A row per operation and route: its seconds (and its transfer's)."""
  rows = []
  for name, key, transfer in (
    ("save, local disk", "save_local", None),
    ("save, gs:// (gcsfs)", "save_gcsfs", "upload"),
    ("restore, local disk", "restore_local", None),
    ("restore, gs:// (gcsfs)", "restore_gcsfs", "download"),
  ):
    row = {
      "name": name,
      **stats.spread_fields("seconds", times[key]),
      "seconds_per_round": times[key],
      "megabytes_per_second": megabytes / statistics.median(times[key]),
    }
    if transfer:
      row.update(stats.spread_fields("transfer_seconds", times[transfer]))
      row["transfer_seconds_per_round"] = times[transfer]
    rows.append(row)
  return rows


# --- Training with checkpoints ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrainerRun:
  """What one trainer run's progress events (`CTL_EVENTS`) say.

  Attributes:
    restored_step: the step it resumed from, or None for a fresh start.
    first_step: the first step of the timing window: the first train loop
      ending at a multiple of the window's steps (where the trainer logs).
    last_step: the last step of the window.
    examples_per_second: examples trained between the first and the last
      window step, over the time between their loop ends (saves included).
    save_seconds: for each save that ends after the train loop of the same
      step (with no evaluation between), the time from that loop's end to
      the save's end: how long the save blocked training.
    seconds_to_first_step: process start to the window's first loop end.
    seconds_to_restore: process start to the end of the restore, or None.
    wall_seconds: process start to exit.
  """

  restored_step: int | None
  first_step: int
  last_step: int
  examples_per_second: float
  save_seconds: tuple[float, ...]
  seconds_to_first_step: float
  seconds_to_restore: float | None
  wall_seconds: float


_LOOPS = (progress_lib.FIRST_LOOP, progress_lib.TRAIN_LOOP)


def read_trainer_run(
  events: Sequence[events_lib.Event],
  *,
  started: float,
  window_every: int,
  global_batch_size: int,
  wall_seconds: float,
) -> TrainerRun:
  """Reads a trainer run from its progress events.

  Args:
    events: the run's events (`events_lib.read_events`), in order.
    started: the wall time (`time.time()`) the process was started at; the
      events' times are wall times of the same machine.
    window_every: the window's steps are the loop ends at its multiples
      (the trainer's --log_every_steps).
    global_batch_size: examples per step.
    wall_seconds: process start to exit.

  Returns:
    The run's numbers.

  Raises:
    ValueError: fewer than two train loops end at a window step.
  """
  ends = [e for e in events if e["worker"] == 0 and e["seconds"] is not None]
  restored = next(
    (
      e
      for e in ends
      if e["phase"] == progress_lib.RESTORE and e["ok"] and e["step"]
    ),
    None,
  )
  window = [
    e for e in ends if e["phase"] in _LOOPS and e["step"] % window_every == 0
  ]
  if len(window) < 2:
    raise ValueError(f"{len(window)} train loops end at a window step; need 2.")
  first, last = window[0], window[-1]
  return TrainerRun(
    restored_step=restored and restored["step"],
    first_step=first["step"],
    last_step=last["step"],
    examples_per_second=(last["step"] - first["step"])
    * global_batch_size
    / max(last["time"] - first["time"], 1e-6),
    save_seconds=_save_seconds(ends),
    seconds_to_first_step=first["time"] - started,
    seconds_to_restore=restored and restored["time"] - started,
    wall_seconds=wall_seconds,
  )


def _save_seconds(ends: Sequence[events_lib.Event]) -> tuple[float, ...]:
  """Loop end to save end, for each save right after its step's loop."""
  seconds = []
  loop = None  # The end of the train loop just before.
  for event in ends:
    if event["phase"] in _LOOPS:
      loop = event
    elif event["phase"] == progress_lib.EVALUATION:
      loop = None  # An evaluation is not part of the save.
    elif event["phase"] == progress_lib.CHECKPOINT_SAVE:
      if loop and loop["step"] == event["step"]:
        seconds.append(event["time"] - loop["time"])
      loop = None
  return tuple(seconds)


def trainer_flags(
  config: Config, variant: Variant, *, model_dir: str, round_index: int
) -> list[str]:
  """The trainer's flags for one round of one variant."""
  return [
    "--dataset=digits",
    f"--model={config.model}",
    f"--image_size={config.image_size}",
    f"--per_replica_batch_size={config.batch_size}",
    f"--train_steps={(round_index + 1) * config.train_steps}",
    f"--steps_per_loop={config.steps_per_loop}",
    f"--log_every_steps={config.checkpoint_every}",
    f"--checkpoint_every_steps={config.checkpoint_every}",
    "--checkpoint_every_secs=0",
    "--eval_every_steps=0",
    "--keep_checkpoints=2",
    f"--model_dir={model_dir}",
    *(("--storage=gcsfs",) if variant.route == "gcsfs" else ()),
    *variant.flags,
  ]


def measure_training(
  config: Config,
  workdir: str,
  *,
  endpoint: str,
  budget: budget_lib.Budget,
  after_round: Callable[[dict], None] = lambda runs: None,
) -> dict[str, list[TrainerRun]]:
  """Runs every variant `repeats` times, interleaved.

  Args:
    config: what to run.
    workdir: a directory for local model dirs and TMPDIRs.
    endpoint: the emulator's, for gs:// variants.
    budget: cuts the rounds after the first to those that fit.
    after_round: called with the runs so far after each round but the last.

  Returns:
    {variant key: its runs, one per round}.

  Raises:
    RuntimeError: a trainer run failed or did not resume where expected.
  """
  runs = {key: [] for key in config.variants}
  rounds, round_index = config.repeats, 0
  while round_index < rounds:
    start = time.perf_counter()
    for key in config.variants:
      run_ = _train_round(
        config, key, round_index, workdir=workdir, endpoint=endpoint
      )
      runs[key].append(run_)
      logging.info(
        "%s round %d: %.0f examples/s, saves %s s",
        key,
        round_index,
        run_.examples_per_second,
        [round(s, 3) for s in run_.save_seconds],
      )
    if round_index == 0:
      rounds = budget.rounds(
        time.perf_counter() - start, rounds, what="training rounds"
      )
    round_index += 1
    if round_index < rounds:
      after_round(runs)
  return runs


def _train_round(
  config: Config, key: str, round_index: int, *, workdir: str, endpoint: str
) -> TrainerRun:
  """Runs round `round_index` of variant `key` in a fresh TMPDIR.

  Raises:
    RuntimeError: the run failed or did not resume from the end of the
      previous round.
  """
  variant = _BY_KEY[key]
  model_dir = (
    f"gs://{BUCKET}/runs/{key}"
    if variant.route == "gcsfs"
    else os.path.join(workdir, "runs", key)
  )
  tmpdir = os.path.join(workdir, "tmp", f"{key}-{round_index}")
  os.makedirs(tmpdir)
  os.makedirs(os.path.join(workdir, "events"), exist_ok=True)
  env = trainer_testing.trainer_env(
    STORAGE_EMULATOR_HOST=endpoint,
    GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
    TMPDIR=tmpdir,
  )
  command = trainer_testing.trainer_command(
    *trainer_flags(
      config, variant, model_dir=model_dir, round_index=round_index
    )
  )
  run_ = _run_trainer(
    command,
    env=env,
    config=config,
    events=os.path.join(workdir, "events", f"{key}-{round_index}.jsonl"),
  )
  expected = round_index * config.train_steps or None
  if run_.restored_step != expected:
    raise RuntimeError(
      f"{key} round {round_index} resumed from step "
      f"{run_.restored_step}, expected {expected}."
    )
  shutil.rmtree(tmpdir)
  return run_


def _run_trainer(
  command: list[str], *, env: dict, config: Config, events: str
) -> TrainerRun:
  """Runs the trainer to its end; reads it from its events file `events`."""
  started = time.time()
  process = trainer_testing.start(command, events=events, env=env)
  try:
    code, output = trainer_testing.finish(
      process, timeout=config.trainer_timeout_secs
    )
  except subprocess.TimeoutExpired:
    process.kill()
    code, output = trainer_testing.finish(process)
  wall = time.time() - started
  if code:
    tail = "\n".join(output.splitlines()[-15:])
    raise RuntimeError(f"{' '.join(command)} exited with {code}:\n{tail}")
  return read_trainer_run(
    events_lib.read_events(events),
    started=started,
    window_every=config.checkpoint_every,
    global_batch_size=config.batch_size,
    wall_seconds=wall,
  )


def training_section(
  config: Config, runs: dict[str, list[TrainerRun]], *, status: str = "ok"
) -> dict:
  """The training-cost section from `measure_training`'s runs."""
  rates = {
    key: [r.examples_per_second for r in key_runs]
    for key, key_runs in runs.items()
  }
  ratios = [
    stats.ratio(
      name=f"{_BY_KEY[a].label} / {_BY_KEY[b].label}",
      numerator=_BY_KEY[a].label,
      numerator_values=rates[a],
      denominator=_BY_KEY[b].label,
      denominator_values=rates[b],
    )
    for a, b in RATIOS
    if a in runs and b in runs
  ]
  rows = [
    _training_row(key, key_runs, rates, baseline=config.variants[0])
    for key, key_runs in runs.items()
  ]
  return report_lib.section(
    title=(
      f"Training cost of checkpoints: {config.model} "
      f"{config.image_size}x{config.image_size}, a save every "
      f"{config.checkpoint_every} steps, local disk vs gs://"
    ),
    rows=rows,
    ratios=ratios,
    chart_key="examples_per_second",
    status=status,
    notes=_training_notes(config, runs, rows),
    columns=[
      "name",
      "examples_per_second",
      "throughput_cost_percent",
      "save_seconds",
      "seconds_to_first_step_fresh",
      "seconds_to_first_step_resumed",
    ],
    config={
      "model": config.model,
      "image_size": config.image_size,
      "per_replica_batch_size": config.batch_size,
      "steps_per_round": config.train_steps,
      "checkpoint_every_steps": config.checkpoint_every,
      "steps_per_loop": config.steps_per_loop,
      "repeats": config.repeats,
      "variants": list(config.variants),
    },
  )


def _training_row(
  key: str, key_runs: list[TrainerRun], rates: dict, *, baseline: str
) -> dict:
  """Variant `key`'s row: throughput, its cost against `baseline`'s, its
  saves' seconds, and its fresh and resumed starts."""
  saves = [s for r in key_runs for s in r.save_seconds]
  resumed = [r.seconds_to_first_step for r in key_runs[1:]]
  row = {
    "name": _BY_KEY[key].label,
    **stats.spread_fields("examples_per_second", rates[key]),
    "examples_per_second_per_round": rates[key],
    "save_count": len(saves),
    "save_seconds_all": saves,
    "seconds_to_first_step_fresh": key_runs[0].seconds_to_first_step,
    "seconds_to_first_step_resumed_per_round": resumed,
    "seconds_to_restore_per_round": [
      r.seconds_to_restore for r in key_runs[1:]
    ],
    "restored_steps": [r.restored_step for r in key_runs],
    "wall_seconds_per_round": [r.wall_seconds for r in key_runs],
  }
  if saves:
    row.update(stats.spread_fields("save_seconds", saves))
  if resumed:
    row.update(stats.spread_fields("seconds_to_first_step_resumed", resumed))
  if key != baseline:
    per_round = stats.per_round_ratios(rates[key], rates[baseline])
    row.update(
      stats.spread_fields(
        "throughput_cost_percent", [100 * (1 - x) for x in per_round]
      )
    )
  return row


def _training_notes(config: Config, runs: dict, rows: list[dict]) -> list[str]:
  first = next(iter(runs.values()))[0]
  notes = [
    f"Each run is `python -m trainer.task` on the digits; round r trains "
    f"steps {config.train_steps}*r to {config.train_steps}*(r+1) in the "
    "variant's own directory, so rounds after the first resume from the "
    "previous round's checkpoint (gs://: downloaded, each run with a fresh "
    "TMPDIR). examples/s is measured between the ends of the first and "
    "the last train loop at a logged step, read from the run's progress "
    f"events (steps {first.first_step}-{first.last_step} in round 0), the "
    "saves in between included; startup, the final evaluation, save and "
    "export are not.",
    "save_seconds: from the end of a train loop to the end of the "
    "checkpoint save of the same step, i.e. how long that step's "
    "bookkeeping blocked training: its log line and summaries (on gs://, "
    "uploading the TensorBoard events file, once per save here) and the "
    "save. With --async_checkpoint the save "
    "returns once the write has started, after waiting for the previous "
    "one and, on gs://, uploading it: a checkpoint is uploaded when the "
    "next save (or the end of the run) syncs it. Where the training step "
    "already fills every core (a CPU-only machine), the background write "
    "competes with it for them: a short block need not mean a small "
    "throughput cost.",
    "throughput_cost_percent: 100 x (1 - the per-round throughput ratio "
    f"to '{_BY_KEY[config.variants[0]].label}'); negative means faster, "
    "i.e. inside the noise. seconds_to_first_step: process start to the "
    f"end of the train loop at step {config.checkpoint_every} (tracing "
    "included), fresh (round 0) vs resumed (later rounds).",
  ]
  for row in rows:
    if "throughput_cost_percent" in row:
      notes.append(
        f"{row['name']}: {row['throughput_cost_percent']:.1f}% of "
        f"throughput ({row['throughput_cost_percent_min']:.1f} to "
        f"{row['throughput_cost_percent_max']:.1f} over rounds)"
        + (
          f", {row['save_seconds']:.3f} s per save"
          if row.get("save_seconds") is not None
          else ""
        )
        + "."
      )
  return notes


# --- Helpers -----------------------------------------------------------------


def _timed(fn, *args, **kwargs) -> float:
  start = time.perf_counter()
  fn(*args, **kwargs)
  return time.perf_counter() - start


def _megabytes(directory: str) -> float:
  return (
    sum(
      os.path.getsize(os.path.join(directory, name))
      for name in os.listdir(directory)
      if name.startswith("ckpt-")
    )
    / 1e6
  )
