"""Goodput under faults: our engine vs Keras `fit` + `BackupAndRestore`.

The same small job (the trainer's small CNN on digits, the same data order,
steps, batch and seed) is run four times: uninterrupted and with the same
seeded schedule of K worker kills (the worker SIGKILLs itself when the job
reaches given steps, so every kill lands at its step however loaded the
machine), by

  ctl:   python -m ctl.launch --num_workers=1 --max_restarts=K -- \
             python -m trainer.task ... --checkpoint_every_steps=N
         with CTL_FAULTS=crash@STEP:PLACE:attempt=I for each of
         `_KILL_PLACES` (ctl.resilience.faults): attempt I dies at the
         first loop boundary at or after STEP, before anything is saved
         there;
  keras: python -m benchmarks.workloads.goodput_keras (model.fit with
         keras.callbacks.BackupAndRestore(save_freq=N)), re-run after each
         failure by a retry loop with the launcher's backoff, as the Keras
         documentation tells users to do; --kill_at_step=STEP: the end of
         that batch, after its backup.

For each: wall time, goodput (the time the final model's steps take at the
system's median step time, over the wall time), steps run twice, and whether
the final weights equal the uninterrupted run's (SHA-256 over every model and
optimizer variable). The ctl row also gives the run ledger's own goodput
split (ctl.telemetry.goodput). The app is `benchmarks/recovery/goodput.py`.
"""

import dataclasses
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from absl import logging

from benchmarks.harness import budget as budget_lib
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings
from ctl import env as ctl_env
from ctl.errors import UserError
from ctl.telemetry import goodput
from ctl.telemetry import ledger_reader
from trainer import testing as trainer_testing

# Where ctl's kill may fire: whichever of them starts first at or after the
# kill's step, so the worker dies at the first loop boundary at or after it
# before saving there (progress phases, `ctl.resilience.faults` places).
_KILL_PLACES = ("checkpoint_save", "local_checkpoint_save", "loop")


@dataclasses.dataclass(frozen=True)
class Config:
  """One goodput comparison; its `settings.flag` fields are goodput.py's flags.

  `epochs` is the job's length; `kills` is K, the number of SIGKILLs.
  """

  epochs: int = settings.flag(4, "Passes over the digits training split.")
  checkpoint_every: int = settings.flag(
    20, "Steps between checkpoints (ctl) and backups (Keras save_freq)."
  )
  kills: int = settings.flag(2, "SIGKILLs per faulty run.")
  kill_seed: int = settings.flag(0, "Seed of the kill schedule.")
  image_size: int = settings.flag(16, "Image side.")
  batch_size: int = settings.flag(32, "Global batch.")
  backoff_secs: float = settings.flag(
    1.0, "Wait before the first restart; doubles every restart (both systems)."
  )
  run_timeout_secs: int = settings.flag(300, "Limit for one run.")
  restart_model: str = settings.flag(
    "resnet50",
    "Model whose restart cost (process start to the first "
    "resumed step) is split into imports, build, restore and "
    "tracing; none skips it.",
    choices=("resnet50", "small_cnn", "none"),
  )
  restart_image_size: int = settings.flag(224, "Image side for it.")
  restart_batch_size: int = settings.flag(8, "Batch for it.")
  time_budget_secs: float = 0.0  # --time_budget_secs (`budget`).
  section: str = "goodput"


def kill_schedule(config: Config, steps_per_epoch: int) -> list[int]:
  """K job positions (steps) at which to kill, increasing, seeded.

  Consecutive kills are more than an epoch apart, so that a job that resumes
  from the start of an epoch (Keras) still reaches each one after the last.
  """
  rng = random.Random(config.kill_seed)
  total = config.epochs * steps_per_epoch
  kills, low = [], config.checkpoint_every + 1
  for index in range(config.kills):
    left = config.kills - index - 1
    high = total - 5 - left * (steps_per_epoch + 5)
    if high <= low:
      raise UserError(f"{config.kills} kills do not fit in {total} steps.")
    kills.append(rng.randint(low, high))
    low = kills[-1] + steps_per_epoch + 5
  return kills


def _trainer_flags(config: Config, steps: int, model_dir: str) -> list[str]:
  return [
    "--dataset=digits",
    "--model=small_cnn",
    "--dropout=0.1",
    f"--image_size={config.image_size}",
    f"--per_replica_batch_size={config.batch_size}",
    "--learning_rate=0.003",
    "--deterministic",
    f"--train_steps={steps}",
    "--steps_per_loop=5",
    "--log_every_steps=5",
    "--eval_every_steps=0",
    f"--checkpoint_every_steps={config.checkpoint_every}",
    "--checkpoint_every_secs=0",
    f"--model_dir={model_dir}",
  ]


def _env() -> dict:
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1")


def run_ctl(config: Config, *, steps: int, kills: list[int], root: str) -> dict:
  """Our engine under ctl.launch, killed at `kills`; what it cost.

  Attempt I of the worker SIGKILLs itself (`crash` faults) at the first
  of `_KILL_PLACES` that starts at or after step `kills[I]`.
  """
  model_dir = os.path.join(root, "run")
  command = trainer_testing.launch_command(
    "--num_workers=1",
    f"--max_restarts={len(kills)}",
    f"--restart_backoff_secs={config.backoff_secs}",
    trainer_flags=_trainer_flags(config, steps, model_dir),
  )
  crashes = ",".join(
    f"crash@{kill}:{where}:attempt={index}"
    for index, kill in enumerate(kills)
    for where in _KILL_PLACES
  )
  env = _env() | (ctl_env.faults_environment(crashes) if kills else {})
  directory = ledger_reader.ledger_dir(model_dir)
  with tempfile.TemporaryFile("w+") as log:
    started = time.time()
    process = subprocess.Popen(
      command, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    code = _wait(process, log, config)
    wall = time.time() - started
    accounting = goodput.account(ledger_reader.read(directory))
    if code or len(accounting.attempts) != len(kills) + 1:
      raise RuntimeError(
        f"ctl exited with {code} after {len(accounting.attempts)} starts "
        f"for {len(kills)} kills: {_tail(log)}"
      )
  with open(os.path.join(model_dir, "train_summary.json")) as f:
    summary = json.load(f)
  attempts = ledger_reader.read(directory)
  rates = [
    e["busy"] / (e["step"] - e["step0"])
    for events in attempts
    for e in events
    if e.get("phase") == "train_loop" and e["step"] > e["step0"]
  ]
  executed = sum(
    a.last_step - (a.restored_step or 0) for a in accounting.attempts
  )
  return {
    "wall_seconds": wall,
    "step_seconds": statistics.median(rates),
    "steps": steps,
    "steps_executed": executed,
    "fingerprint": summary["weights_fingerprint"],
    "ledger_goodput_percent": accounting.goodput_percent,
    "ledger_seconds": accounting.seconds,
    "attempts": len(accounting.attempts),
  }


def run_keras(config: Config, *, kills: list[int], root: str) -> dict:
  """Keras fit + BackupAndRestore, re-run after each kill; what it cost.

  Attempt I SIGKILLs itself at the end of the batch that reaches step
  `kills[I]` (--kill_at_step).
  """
  progress = os.path.join(root, "progress.jsonl")
  command = [
    sys.executable,
    "-m",
    "benchmarks.workloads.goodput_keras",
    f"--backup_dir={os.path.join(root, 'backup')}",
    f"--progress={progress}",
    f"--epochs={config.epochs}",
    f"--save_freq={config.checkpoint_every}",
    f"--image_size={config.image_size}",
    f"--batch_size={config.batch_size}",
  ]
  open(progress, "w").close()
  with tempfile.TemporaryFile("w+") as log:
    started = time.time()
    for attempts, kill in enumerate([*kills, None], start=1):
      process = subprocess.Popen(
        command + ([] if kill is None else [f"--kill_at_step={kill}"]),
        env=_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
      )
      code = _wait(process, log, config)
      if code != (0 if kill is None else -signal.SIGKILL):
        raise RuntimeError(
          f"keras attempt {attempts} of {len(kills) + 1} exited with "
          f"{code}: {_tail(log)}"
        )
      if kill is not None:
        time.sleep(min(config.backoff_secs * 2 ** (attempts - 1), 300.0))
    wall = time.time() - started
  with open(progress) as f:
    batches = [json.loads(line) for line in f if line.strip()]
  with open(progress + ".done") as f:
    done = json.load(f)
  return {
    "wall_seconds": wall,
    "step_seconds": statistics.median(b["t1"] - b["t0"] for b in batches),
    "steps": done["steps"],
    "steps_executed": len(batches),
    "fingerprint": done["weights_fingerprint"],
    "attempts": attempts,
  }


def _wait(process: subprocess.Popen, log, config: Config) -> int:
  """`process`'s exit code; killed, and an error, past the run's limit."""
  try:
    return process.wait(timeout=config.run_timeout_secs)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait()
    raise RuntimeError(
      f"ran past {config.run_timeout_secs} s: {_tail(log)}"
    ) from None


def _tail(log) -> str:
  """The end of a run's output file."""
  log.seek(0)
  return log.read()[-1500:]


def restart_cost(
  config: Config,
  root: str,
  budget: budget_lib.Budget,
  start_secs: float,
) -> dict | None:
  """Process start to the first resumed step of a restarted run, split.

  Trains 2 steps (one checkpoint at the end), then runs the same command to
  step 4: the second process restores step 2 and trains two one-step loops.
  Its ledger splits its start: imports (process start to `ctl.run`: the
  interpreter, TensorFlow, flags, strategy, data source), build (outputs,
  model, optimizer), restore, and tracing (the first loop less one step at
  the second loop's speed).

  None where `budget` cannot hold it: skipped before the first process when
  two start-ups of `start_secs` (a trainer's, the least a process takes) do
  not fit, or before the second when another as long as the first does not.
  """
  model_dir = os.path.join(root, "restart")
  flags = [
    "--dataset=synthetic",
    f"--model={config.restart_model}",
    f"--image_size={config.restart_image_size}",
    f"--per_replica_batch_size={config.restart_batch_size}",
    "--steps_per_loop=1",
    "--log_every_steps=1",
    "--checkpoint_every_steps=0",
    "--checkpoint_every_secs=0",
    "--max_nan_recoveries=0",
    f"--model_dir={model_dir}",
  ]
  estimate = 2 * start_secs
  for steps in (2, 4):
    if not budget.fits(estimate):
      budget.record(
        "restart-cost measurements",
        0,
        1,
        f"the restart cost was skipped: {estimate:.0f} s more did not fit",
      )
      return None
    started = time.perf_counter()
    subprocess.run(
      [sys.executable, "-m", "trainer.task", *flags, f"--train_steps={steps}"],
      env=_env(),
      check=True,
      capture_output=True,
      timeout=config.run_timeout_secs,
    )
    estimate = time.perf_counter() - started  # The second: like the first.
  budget.record("restart-cost measurements", 1, 1, "")
  return _restart_parts(model_dir)


def _restart_parts(model_dir: str) -> dict:
  """`restart_cost`'s split, from the ledger of the run in `model_dir`."""
  events = ledger_reader.read(ledger_reader.ledger_dir(model_dir))[-1]
  phases = {}
  for e in events:
    if e["event"] == "phase":
      phases.setdefault(e["phase"], e)
  start = events[0]["time"]
  run_at = next(e["time"] for e in events if e["event"] == "run")
  restore = phases["restore"]["t1"] - phases["restore"]["t0"]
  first = phases["first_loop"]
  second = phases["train_loop"]
  step = second["busy"] / (second["step"] - second["step0"])
  parts = {
    "imports": run_at - start,
    "build": phases["startup"]["t1"] - run_at - restore,
    "restore": restore,
    "tracing": max(0.0, first["t1"] - first["t0"] - step),
    "first step": min(step, first["t1"] - first["t0"]),
  }
  parts["other (input iterator, bookkeeping)"] = (
    first["t1"] - start - sum(parts.values())
  )
  return {
    "parts": parts,
    "total": first["t1"] - start,
    "restored_step": phases["startup"]["step"],
    "step_seconds": step,
  }


def _row(name: str, faulty: dict, clean: dict) -> dict:
  useful = faulty["steps"] * faulty["step_seconds"]
  return {
    "name": name,
    "wall_seconds": round(faulty["wall_seconds"], 1),
    "uninterrupted_wall_seconds": round(clean["wall_seconds"], 1),
    "goodput_percent": round(100.0 * useful / faulty["wall_seconds"], 1),
    "steps_redone": faulty["steps_executed"] - faulty["steps"],
    "same_weights_as_uninterrupted": faulty["fingerprint"]
    == clean["fingerprint"],
    "starts": faulty["attempts"],
  }


def run(config: Config) -> dict:
  """Runs both systems with and without the kills; returns {section}.

  With `config.time_budget_secs`, the epochs of every run after the first
  (ctl's uninterrupted run, at `config.epochs`) are cut to those that fit
  it (`_sized`), and the restart cost is measured only where it fits.
  """
  from ctl.data import input as input_lib  # pylint: disable=g-import-not-at-top
  from trainer import data as data_lib  # pylint: disable=g-import-not-at-top

  budget = budget_lib.Budget(config.time_budget_secs)
  source = data_lib.load("digits", image_size=config.image_size)
  steps_per_epoch = input_lib.steps_per_epoch(
    source.num_train, config.batch_size
  )
  kill_schedule(config, steps_per_epoch)  # Fails early where kills don't fit.
  with tempfile.TemporaryDirectory(prefix="ctl_bench_goodput_") as root:
    config, results = _run_systems(config, steps_per_epoch, root, budget)
    restart = (
      restart_cost(config, root, budget, _start_secs(results["ctl", "clean"]))
      if config.restart_model != "none"
      else None
    )
  steps = config.epochs * steps_per_epoch
  kills = kill_schedule(config, steps_per_epoch)
  ctl_row = _row(
    "ctl engine + ctl.launch", results["ctl", "faulty"], results["ctl", "clean"]
  )
  keras_row = _row(
    "Keras fit + BackupAndRestore",
    results["keras", "faulty"],
    results["keras", "clean"],
  )
  sections = {
    config.section: budget.stamp(
      report_lib.section(
        title=f"Goodput under faults: {config.kills} SIGKILLs, ctl vs Keras "
        "BackupAndRestore",
        rows=[ctl_row, keras_row],
        chart_key="goodput_percent",
        notes=_goodput_notes(
          config, steps, steps_per_epoch, kills, results["ctl", "faulty"]
        ),
        columns=[
          "name",
          "wall_seconds",
          "uninterrupted_wall_seconds",
          "goodput_percent",
          "steps_redone",
          "same_weights_as_uninterrupted",
          "starts",
        ],
        config=dataclasses.asdict(config) | {"steps": steps, "kills_at": kills},
      )
    )
  }
  if restart:
    sections[f"{config.section}_restart"] = _restart_section(config, restart)
  return sections


def _run_systems(
  config: Config, steps_per_epoch: int, root: str, budget: budget_lib.Budget
) -> tuple[Config, dict]:
  """Runs ctl and Keras, clean and under the kill schedule, each in its own
  directory under `root`; every run after ctl's clean one at the epochs that
  fit `budget` (`_sized`), and that one again when they are fewer, so that
  all four have the same length.

  Returns:
    (config with the epochs run, {(system, "clean" or "faulty"): run}).
  """
  first = _run_one(config, "ctl", "clean", steps_per_epoch, root)
  sized = _sized(config, steps_per_epoch, first, budget)
  runs = [("keras", "clean"), ("ctl", "faulty"), ("keras", "faulty")]
  if sized.epochs < config.epochs:
    runs.insert(0, ("ctl", "clean"))
  results = {("ctl", "clean"): first}
  for system, name in runs:
    results[system, name] = _run_one(sized, system, name, steps_per_epoch, root)
  return sized, results


def _run_one(
  config: Config, system: str, name: str, steps_per_epoch: int, root: str
) -> dict:
  """`system` ("ctl" or "keras") for `config.epochs`, uninterrupted ("clean")
  or under the kill schedule ("faulty"), in its own directory under `root`."""
  directory = os.path.join(root, f"{system}_{name}_{config.epochs}")
  os.makedirs(directory)
  kills = kill_schedule(config, steps_per_epoch) if name == "faulty" else []
  if system == "ctl":
    steps = config.epochs * steps_per_epoch
    result = run_ctl(config, steps=steps, kills=kills, root=directory)
  else:
    result = run_keras(config, kills=kills, root=directory)
  logging.info("%s %s: %s", system, name, result)
  return result


def _sized(
  config: Config, steps_per_epoch: int, first: dict, budget: budget_lib.Budget
) -> Config:
  """`config` with the epochs (never fewer than the fewest that hold the
  kills) whose three other runs, and ctl's clean run again if they are
  fewer, fit `budget`; estimated from `first`, ctl's clean run: its start-up
  (wall time less its steps) for each start, its median step for each step,
  an epoch redone per kill, and the backoffs."""
  start_secs = _start_secs(first)
  epoch_secs = steps_per_epoch * first["step_seconds"]
  restarts = sum(
    start_secs + epoch_secs + min(config.backoff_secs * 2**index, 300.0)
    for index in range(config.kills)
  )

  def estimate(epochs: int) -> float:
    run_secs = start_secs + epochs * epoch_secs
    again = run_secs if epochs < config.epochs else 0.0
    return again + 3 * run_secs + 2 * restarts

  floor = next(
    epochs
    for epochs in range(1, config.epochs + 1)
    if _kills_fit(dataclasses.replace(config, epochs=epochs), steps_per_epoch)
  )
  epochs = budget_lib.plan_by_estimate(
    estimate, config.epochs, budget.secs, budget.spent(), floor
  )
  budget.record(
    "epochs",
    epochs,
    config.epochs,
    f"ctl's uninterrupted run took {first['wall_seconds']:.0f} s and was run "
    f"again at the epochs used; floor {floor}, the fewest epochs that hold "
    f"the {config.kills} kills",
  )
  return dataclasses.replace(config, epochs=epochs)


def _kills_fit(config: Config, steps_per_epoch: int) -> bool:
  try:
    kill_schedule(config, steps_per_epoch)
  except UserError:
    return False
  return True


def _start_secs(run: dict) -> float:
  """A run's wall time less its steps at its median step time."""
  return max(0.0, run["wall_seconds"] - run["steps"] * run["step_seconds"])


def _goodput_notes(
  config: Config, steps: int, steps_per_epoch: int, kills: list, faulty: dict
) -> list[str]:
  """The goodput section's notes; `faulty` is ctl's run under the kills."""
  ledger_split = faulty["ledger_seconds"]
  ledger_percent = faulty["ledger_goodput_percent"]
  return [
    f"{steps} steps ({config.epochs} epochs of {steps_per_epoch}), batch "
    f"{config.batch_size}, small_cnn on digits {config.image_size}x"
    f"{config.image_size}, deterministic ops; a checkpoint (ctl) or backup "
    f"(Keras save_freq) every {config.checkpoint_every} steps; the worker "
    f"SIGKILLs itself when the job reaches steps {kills} (seed "
    f"{config.kill_seed}): ctl at the first 5-step loop boundary at or "
    "after it, before anything is saved there; Keras "
    "at the end of that batch, after its backup. Restarts after "
    f"{config.backoff_secs:g} s, doubling.",
    "goodput_percent = steps x the system's median step time / wall time, "
    "the same formula for both. The ctl run ledger's own accounting of "
    f"the faulty run: goodput {ledger_percent:.1f}%, "
    + ", ".join(f"{k} {v:.1f} s" for k, v in ledger_split.items() if v),
    "Keras 3's BackupAndRestore saves the epoch and batch but restores "
    "only the epoch: a restarted fit begins that epoch again (from its "
    "first batch, on the backed-up weights), so every step of the epoch "
    "before the kill is trained again and the data order differs from "
    "the uninterrupted run's. ctl resumes at the checkpointed step with "
    "the data position derived from it.",
    "ctl's wall time also includes what Keras fit does not do here: a "
    "checkpoint at step 0, the final evaluation and the SavedModel export; "
    "ctl runs 5 steps per tf.function call, fit one.",
  ]


def _restart_section(config: Config, restart: dict) -> dict:
  """The restart-cost section from `restart_cost`'s parts."""
  size = config.restart_image_size
  return report_lib.section(
    title=f"Restart cost: {config.restart_model} {size}x{size}, process "
    "start to the first resumed step",
    rows=[
      {"name": name, "seconds": round(seconds, 2)}
      for name, seconds in restart["parts"].items()
    ],
    chart_key="seconds",
    columns=["name", "seconds"],
    notes=[
      f"A re-run restoring step {restart['restored_step']}: "
      f"{restart['total']:.1f} s from process start to the end of "
      "its first step, read from its run ledger. imports: process "
      "start to ctl.run (interpreter, TensorFlow, flags, strategy, "
      "data source); build: outputs, model and optimizer; tracing: "
      "the first loop less one step at the second loop's speed "
      f"({restart['step_seconds']:.2f} s). Synthetic data, batch "
      f"{config.restart_batch_size}, local disk."
    ],
    config={
      "model": config.restart_model,
      "image_size": size,
      "batch_size": config.restart_batch_size,
    },
  )
