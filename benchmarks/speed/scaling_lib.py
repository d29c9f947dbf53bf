"""Scaling: the trainer on 1 vs 2 local workers, same per-replica batch.

Runs the real command line a user runs,

  python -m ctl.launch --num_workers=K -- python -m trainer.task ...

for K = 1 and K = 2 (MultiWorkerMirroredStrategy over loopback), in
alternating rounds, and reads `examples_per_second` (global, the median over
the run's log windows after the first) from `<model_dir>/train_summary.json`.
On one machine the workers share its cores (e.g. 2 CPU cores), so the ratio
shows coordination cost (an all-reduce per step over gRPC) and idle cores
taken up, not a speed-up from more hardware. The app is
`benchmarks/speed/scaling.py`.
"""

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time

from absl import logging

from benchmarks.harness import budget as budget_lib
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings
from benchmarks.harness import stats
from ctl.testing import run_files
from trainer import testing as trainer_testing


@dataclasses.dataclass(frozen=True)
class Config(settings.Rounds):
  """One scaling run; its `settings.flag` fields are `scaling.py`'s flags.

  Attributes:
    worker_command: the trainer command each worker runs (the trainer's
      flags are appended); tests put a stand-in here.
  """

  model: str = settings.flag(
    "small_cnn", "Trainer --model.", choices=("resnet50", "small_cnn")
  )
  image_size: int = settings.flag(32, "Trainer --image_size.")
  batch_size: int = settings.flag(
    32,
    "Trainer --per_replica_batch_size (the same for every count).",
    name="per_replica_batch_size",
  )
  steps: int = settings.flag(200, "Trainer --train_steps.", name="train_steps")
  steps_per_loop: int = settings.flag(
    20,
    "Trainer --steps_per_loop and "
    "--log_every_steps (one throughput window each).",
  )
  worker_counts: tuple[int, ...] = settings.flag(
    (1, 2), "Worker counts to compare; the first is the baseline."
  )
  workers_on_cpu: bool = settings.flag(
    True,
    "Hide GPUs from the workers, so "
    "they do not fight over one GPU on a one-GPU machine.",
  )
  run_timeout_secs: int = settings.flag(300, "Limit for one trainer run.")
  worker_command: tuple[str, ...] = tuple(trainer_testing.trainer_command())
  section: str = "scaling"


def trainer_flags(config: Config, model_dir: str) -> list[str]:
  """The trainer's flags: synthetic data, no checkpoints but the final one."""
  return [
    "--dataset=synthetic",
    f"--model={config.model}",
    f"--image_size={config.image_size}",
    f"--per_replica_batch_size={config.batch_size}",
    f"--train_steps={config.steps}",
    f"--steps_per_loop={config.steps_per_loop}",
    f"--log_every_steps={config.steps_per_loop}",
    "--checkpoint_every_steps=0",
    "--checkpoint_every_secs=0",
    "--max_nan_recoveries=0",
    f"--model_dir={model_dir}",
  ]


def run_once(config: Config, workers: int, model_dir: str) -> dict:
  """Runs the launcher once; returns the chief's train_summary.json.

  Raises:
    RuntimeError: the launcher failed or ran past `run_timeout_secs`, with
      the end of its output.
  """
  command = [
    sys.executable,
    "-m",
    "ctl.launch",
    f"--num_workers={workers}",
    "--",
    *config.worker_command,
    *trainer_flags(config, model_dir),
  ]
  env = trainer_testing.trainer_env()
  if config.workers_on_cpu:
    env["CUDA_VISIBLE_DEVICES"] = "-1"
  with tempfile.TemporaryFile("w+") as log:
    process = subprocess.Popen(
      command, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
      code = process.wait(timeout=config.run_timeout_secs)
    except subprocess.TimeoutExpired:
      # SIGTERM: the launcher forwards it and kills what does not stop.
      process.send_signal(signal.SIGTERM)
      code = process.wait()
      raise RuntimeError(
        f"{workers} worker(s) ran past {config.run_timeout_secs} s."
      ) from None
    if code:
      log.seek(0)
      tail = log.read()[-1500:]
      raise RuntimeError(f"{workers} worker(s) exited with {code}: ...{tail}")
  return run_files.read_summary(model_dir)


def measure(config: Config, budget: budget_lib.Budget) -> tuple[dict, dict]:
  """Alternates the worker counts for `repeats` rounds, or for those that
  fit `budget` at the first round's pace (never below 1).

  Returns:
    ({worker count: examples/s per round}, {worker count: wall seconds per
    round}).
  """
  rates = {count: [] for count in config.worker_counts}
  walls = {count: [] for count in config.worker_counts}
  with tempfile.TemporaryDirectory(prefix="ctl_bench_scaling_") as root:
    for round_index in budget.each_round(config.repeats):
      for count in config.worker_counts:
        model_dir = os.path.join(root, f"round{round_index}_workers{count}")
        start = time.perf_counter()
        summary = run_once(config, count, model_dir)
        walls[count].append(time.perf_counter() - start)
        rates[count].append(float(summary["examples_per_second"]))
        logging.info("%d worker(s): %.1f examples/s", count, rates[count][-1])
  return rates, walls


def run(config: Config) -> dict:
  """Measures every worker count; returns {section}."""
  budget = budget_lib.Budget(config.time_budget_secs)
  rates, walls = measure(config, budget)
  rows, ratios = [], []
  base = config.worker_counts[0]
  for count in config.worker_counts:
    per_worker = [rate / count for rate in rates[count]]
    rows.append(
      {
        "name": f"{count} worker{'s' if count > 1 else ''}",
        "workers": count,
        **stats.spread_fields("examples_per_second", rates[count]),
        "examples_per_second_per_round": rates[count],
        "examples_per_second_per_worker": stats.spread(per_worker)["median"],
        "wall_seconds": stats.spread(walls[count])["median"],
      }
    )
    if count != base:
      ratios.append(
        stats.ratio(
          name=f"{count} workers / {base} worker (global examples/s)",
          numerator=rows[-1]["name"],
          denominator=rows[0]["name"],
          numerator_values=rates[count],
          denominator_values=rates[base],
        )
      )
  cores = os.cpu_count()
  return {
    config.section: budget.stamp(
      report_lib.section(
        title="Scaling: 1 vs 2 local workers (ctl.launch + trainer.task)",
        rows=rows,
        ratios=ratios,
        notes=_notes(config, cores),
        chart_key="examples_per_second",
        columns=[
          "name",
          "examples_per_second",
          "examples_per_second_per_worker",
          "wall_seconds",
        ],
        config={
          "model": config.model,
          "image_size": config.image_size,
          "per_replica_batch_size": config.batch_size,
          "train_steps": config.steps,
          "steps_per_loop": config.steps_per_loop,
          "repeats": config.repeats,
          "cpu_cores": cores,
        },
      )
    )
  }


def _notes(config: Config, cores: int) -> list[str]:
  """What the numbers mean on a machine of `cores` logical cores."""
  return [
    f"Same per-replica batch ({config.batch_size}) for every worker count, "
    f"so K workers train a global batch K times larger; examples/s is "
    "global (all workers), from the chief's train_summary.json.",
    "The ideal for K workers on K times the hardware is K x; scaling "
    "efficiency = ratio / K.",
    f"This machine has {cores} logical cores and every worker shares them "
    "(a GPU, if any, is hidden from the workers). So the ratio is not a "
    "speed-up from more hardware: a gain means one worker left cores "
    "idle, a loss is the coordination cost of MultiWorkerMirroredStrategy "
    "(an all-reduce per step over loopback gRPC) plus the competition.",
    "wall_seconds includes process start, model build, the final "
    "checkpoint and SavedModel export.",
  ]
