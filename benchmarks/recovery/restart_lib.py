"""Restart: seconds from a worker's SIGKILL to the first resumed step.

Two workers on loopback train the small CNN; once the chief has ended a few
loops, worker 1's trainer process is SIGKILLed, and the clock runs until the
chief ends its first train loop after the restart. Three ways to come back,
measured in interleaved rounds (same machine, same moment; `--modes` picks
them, the standard run times cluster and spare, the two its targets compare):

  cluster  today's whole-cluster cold restart: `ctl.launch --num_workers=2
           --max_restarts=3` sees the worker die, stops the other, and starts
           both again (as Vertex AI's restartJobOnWorkerRestart does, without
           its minutes of rescheduling).
  agent    two node agents, `ctl.launch --agent --max_restarts=3`, each given
           one worker's TF_CONFIG as a platform gives each node its own: the
           killed worker's agent restarts it in place; the other worker fails
           when its peer goes and its agent restarts it.
  spare    the same agents with `--warm_spare` (ctl.launch.spare): each restart
           runs in a process started before the kill, its imports done;
           the kill waits until both agents' spares say they are warm.

Each round also splits the time (the runs' `CTL_EVENTS`, on the one
`time.monotonic()` clock of this machine): until the first chief's last
mark (it went down), the restarted chief's first mark (starting again,
interpreter and TensorFlow imports, the job's build), its restore, and its
first loop. `--model=small_cnn` (the standard run: digits, 8x8 images) or
`--model=resnet50` (synthetic 64x64 images: a cold start that traces for
tens of seconds; minutes a round here, so not in the standard run). The app
is `benchmarks/recovery/restart.py`.
"""

from collections.abc import Callable
import contextlib
import dataclasses
import json
import os
import signal
import sys
import tempfile
import time

import psutil

from benchmarks.harness import budget as budget_lib
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings
from benchmarks.harness import stats
from ctl.checkpoint.tiers import node_tiers
from ctl.distributed import ports
from ctl.errors import UserError
from ctl.launch import spare
from ctl.telemetry import progress
from ctl.testing import events as events_lib
from trainer.testing import finish
from trainer.testing import output_so_far
from trainer.testing import start
from trainer.testing import trainer_command
from trainer.testing import trainer_env

MODES = ("cluster", "agent", "spare")
IMAGE_SIZES = {"small_cnn": 8, "resnet50": 64}
_MODEL_FLAGS = {
  "small_cnn": ("--dataset=digits", f"--image_size={IMAGE_SIZES['small_cnn']}"),
  "resnet50": (
    "--dataset=synthetic",
    f"--image_size={IMAGE_SIZES['resnet50']}",
  ),
}
_SEGMENTS = ("to_chief_down", "to_first_mark", "to_restored", "to_resumed_step")


@dataclasses.dataclass(frozen=True)
class Config(settings.Rounds):
  """One restart run; its `settings.flag` fields are `restart.py`'s flags."""

  kill_step: int = settings.flag(20, "Worker 1 is killed at this step.")
  model: str = settings.flag(
    "small_cnn",
    "The trainer's model (resnet50: synthetic images, a long cold start).",
    choices=("small_cnn", "resnet50"),
  )
  run_timeout_secs: int = settings.flag(300, "Limit for one wait in a run.")
  modes: tuple[str, ...] = settings.flag(
    MODES,
    "The ways of coming back each round times, in order (cluster, agent, "
    "spare); the targets need cluster and spare.",
  )
  section: str = "restart"

  def validate(self) -> None:
    """Raises UserError, one sentence, for modes the section cannot run."""
    unknown = sorted(set(self.modes) - set(MODES))
    if unknown or not {"cluster", "spare"} <= set(self.modes):
      raise UserError(
        f"--modes must name cluster and spare, from {', '.join(MODES)}; "
        f"got {', '.join(self.modes) or 'none'}."
      )


def _trainer(config: Config, model_dir: str) -> list[str]:
  return trainer_command(
    *_MODEL_FLAGS[config.model],
    f"--model={config.model}",
    "--per_replica_batch_size=8",
    # Far more than a round needs: the kill lands mid-run, whatever the
    # speed; the run is killed once the chief has resumed.
    "--train_steps=1000000",
    "--steps_per_loop=5",
    "--log_every_steps=5",
    "--checkpoint_every_steps=10",
    "--eval_every_steps=0",
    f"--model_dir={model_dir}",
  )


def launch(
  mode: str, config: Config, model_dir: str, worker: list | None = None
) -> list:
  """The started processes of one run: the launcher, or the two agents.

  `worker`: the trainer command (default: this benchmark's).
  """
  events = f"{model_dir}.events.jsonl"
  flags = ["--max_restarts=3", "--restart_backoff_secs=0"]
  worker = worker or _trainer(config, model_dir)
  launch = [sys.executable, "-m", "ctl.launch"]
  if mode == "cluster":
    command = [*launch, "--num_workers=2", *flags, "--", *worker]
    return [start(command, events=events)]
  if mode == "spare":
    flags.append("--warm_spare")
  addresses = [f"localhost:{port}" for port in ports.free_ports(2)]
  return [
    start(
      [*launch, "--agent", *flags, "--", *worker],
      events=events,
      env=trainer_env(
        TF_CONFIG=json.dumps(
          {
            "cluster": {"worker": addresses},
            "task": {"type": "worker", "index": index},
          }
        )
      ),
    )
    for index in (0, 1)
  ]


def trainer_process(launchers: list, index: int) -> psutil.Process:
  """Worker `index`'s trainer process under the launcher or the agents."""
  for launcher in launchers:
    for child in psutil.Process(launcher.pid).children(recursive=True):
      tf_config = child.environ().get("TF_CONFIG")
      if (  # Not the agent's reaper nor its spare: they have it too.
        tf_config
        and json.loads(tf_config)["task"]["index"] == index
        and "trainer.task" in child.cmdline()
        and "ctl.launch.spare" not in child.cmdline()
      ):
        return child
  raise RuntimeError(f"no worker {index} running")


def one_restart(mode: str, config: Config, model_dir: str) -> dict:
  """Kills worker 1 at `kill_step`; the seconds until the chief resumes.

  Raises:
    AssertionError: the run ended, or a wait passed `run_timeout_secs`
      (with the end of the chief's launcher's output).
  """
  events = f"{model_dir}.events.jsonl"
  launchers = launch(mode, config, model_dir)
  try:
    return _killed_and_resumed(mode, config, launchers, events)
  except AssertionError as e:
    output = output_so_far(launchers[0])[-3000:]
    raise AssertionError(f"{mode} restart: {e}\n{output}") from None
  finally:
    stop(launchers)


def stop(launchers: list) -> None:
  """SIGKILLs a run's launchers, which takes their workers with them, and
  removes the local tiers the run leaves.

  A killed job keeps its tier for its restart on purpose
  (ctl.checkpoint.tiers.node_tiers); no restart of a round comes, and a
  ResNet50 round's tier would hold about 300 MB of RAM until the next
  trainer started on the machine. Its processes are waited for first: a
  tier is removed once its owners are gone (`node_tiers.remove_stale`).
  """
  processes = []
  for launcher in launchers:
    with contextlib.suppress(psutil.NoSuchProcess):
      processes += psutil.Process(launcher.pid).children(recursive=True)
  for launcher in launchers:
    if launcher.poll() is None:
      launcher.kill()
      finish(launcher)
  psutil.wait_procs(processes, timeout=60)
  for setting in ("ram", "disk"):
    node_tiers.remove_stale(node_tiers.choose_root(setting, need_bytes=0))


def _killed_and_resumed(mode, config, launchers, events) -> dict:
  """Worker 1 SIGKILLed at `kill_step`: the seconds until the chief's first
  resumed loop, split (`_split`)."""
  events_lib.wait_for_step(
    events,
    config.kill_step,
    process=launchers[0],
    timeout=config.run_timeout_secs,
  )
  if mode == "spare":
    wait_until_warm(launchers, timeout=config.run_timeout_secs)
  # One train loop more (after the spares' imports, which slow the loops
  # beside them): its step time is what the resumed loop's steps are taken
  # off at (`_split`); a first loop's holds its tracing.
  reached = max(
    e["step"]
    for e in events_lib.read_events(events)
    if e["worker"] == 0 and e["seconds"] is not None
  )
  events_lib.wait_for_step(
    events,
    reached + 1,
    process=launchers[0],
    timeout=config.run_timeout_secs,
  )
  trainer_process(launchers, 1).send_signal(signal.SIGKILL)
  killed = time.monotonic()
  resumed = events_lib.wait_for_event(
    events,
    _first_loop_of_a_restart,
    process=launchers[0],
    timeout=config.run_timeout_secs,
  )
  return _split(events, killed, resumed)


def wait_until_warm(agents: list, *, timeout: float) -> None:
  """Waits until every agent's spare has said it is warm (ctl.launch.spare)."""
  deadline = time.monotonic() + timeout
  while not all(spare.READY_LINE in output_so_far(a) for a in agents):
    if time.monotonic() > deadline or any(a.poll() is not None for a in agents):
      raise AssertionError("the agents' spares did not get warm")
    time.sleep(0.2)


def _first_loop_of_a_restart(event: dict) -> bool:
  return (
    event["worker"] == 0
    and event["attempt"] >= 1
    and event["phase"] == progress.FIRST_LOOP
    and event["seconds"] is not None
  )


def _split(events: str, killed: float, resumed: dict) -> dict:
  """The seconds from the kill to the resumed step, and their segments."""
  chief = [e for e in events_lib.read_events(events) if e["worker"] == 0]
  marks = [e for e in chief if e["pid"] == resumed["pid"]]
  restored = [
    e["monotonic"]
    for e in marks
    if e["phase"] == progress.RESTORE and e["seconds"] is not None
  ]
  first = min(e["monotonic"] for e in marks)
  paces = [
    e["seconds"] / e["steps"]
    for e in chief
    if e["attempt"] == 0
    and e["phase"] == progress.TRAIN_LOOP
    and e["seconds"] is not None
    and e["steps"]
  ]
  assert paces, "no train loop before the kill: no steady step time"
  step_seconds = min(paces)
  return {
    # The killed run's chief: its last mark (the end of its run, when it
    # got to mark it) is about when it went down.
    "to_chief_down": max(e["monotonic"] for e in chief if e["attempt"] == 0)
    - killed,
    "to_first_mark": first - killed,
    "to_restored": (restored[0] if restored else first) - killed,
    "to_resumed_step": resumed["monotonic"] - killed,
    # The restart proper: the resumed loop's own steps train (they are
    # goodput), so they come off, at the fastest train loop's step time
    # before the kill (never more than they took).
    "to_training": resumed["monotonic"]
    - killed
    - resumed["steps"] * step_seconds,
  }


def run(config: Config, progress: Callable[[dict], None] | None = None) -> dict:
  """Measures `config.modes` in interleaved rounds; returns {section}, and gives
  `progress` the section so far after each round.

  With `config.time_budget_secs`, the rounds after the first are cut to
  those that fit it at the first round's pace (never below 1).
  """
  config.validate()
  budget = budget_lib.Budget(config.time_budget_secs)
  found = {mode: [] for mode in config.modes}
  with tempfile.TemporaryDirectory(prefix="ctl_bench_restart_") as root:
    for r in budget.each_round(config.repeats):
      for mode in config.modes:
        found[mode].append(
          one_restart(mode, config, os.path.join(root, f"{mode}{r}"))
        )
      if progress:
        progress(_section(config, found))
  return {
    name: budget.stamp(body) for name, body in _section(config, found).items()
  }


def _section(config: Config, found: dict) -> dict:
  """The section from the seconds `found` per mode (those run: the keys)."""
  rows = [
    {
      "name": mode,
      **{
        key: stats.spread([f[key] for f in found[mode]])["median"]
        for key in _SEGMENTS
      },
      "to_resumed_step_min": min(f["to_resumed_step"] for f in found[mode]),
      "to_resumed_step_max": max(f["to_resumed_step"] for f in found[mode]),
    }
    for mode in found
  ]
  speedup = _ratio(found, "cluster", "spare", "to_resumed_step")
  # A new process against a warm one: the cold cluster restart's chief is
  # a new process, as a cold agent's is, and is timed in every run.
  warm = _ratio(found, "cluster", "spare", "to_first_mark")
  ratios = [speedup, warm]
  if "agent" in found:  # In the report, without a target.
    ratios += [
      _ratio(found, "cluster", "agent", "to_resumed_step"),
      _ratio(found, "agent", "spare", "to_resumed_step"),
    ]
  return {
    config.section: report_lib.section(
      title=f"Restart ({config.model}): SIGKILL of a worker to the first "
      "resumed step",
      rows=rows,
      ratios=ratios,
      notes=_NOTES,
      chart_key="to_resumed_step",
      targets=[
        stats.verdict(
          speedup,
          threshold=1.0,
          name="agents with warm spares restart no slower than a "
          "whole-cluster cold restart (2 workers on loopback)",
        ),
        stats.verdict(
          warm,
          threshold=1.0,
          name="a warm spare starts the restarted chief sooner than a new "
          "process (to its first mark: no interpreter start, no imports)",
        ),
      ],
      columns=["name", *_SEGMENTS],
      config=dataclasses.asdict(config),
    )
  }


def _ratio(found: dict, numerator: str, denominator: str, key: str) -> dict:
  """`numerator`'s seconds over `denominator`'s, round by round."""
  return stats.ratio(
    name=f"{numerator} restart / {denominator} restart (seconds {key})",
    numerator=numerator,
    denominator=denominator,
    numerator_values=[f[key] for f in found[numerator]],
    denominator_values=[f[key] for f in found[denominator]],
  )


_NOTES = [
  "Seconds from worker 1's SIGKILL (small CNN, 2 workers on loopback, "
  "backoff 0) until: the first chief's last progress mark (to_chief_down: "
  "about when it went down); the restarted chief's first progress mark "
  "(to_first_mark: also the backoff, imports and the job's build); its "
  "restore is done (to_restored); it ends its first train loop "
  "(to_resumed_step). Medians over interleaved rounds, with the min-max "
  "range of the total.",
  "The surviving chief goes down either way. The launcher SIGKILLs it "
  "at once (an agreed save cannot complete with its peer SIGKILLed; until "
  "2026-11-29 it sent SIGTERM, and the chief tried that save until its "
  "collective failed, 2-10 s). Under agents nothing tells it: its "
  "collective is aborted only when the restarted peer's new server comes "
  "up (to_chief_down), and its agent restarts it then; so a cold agent "
  "restart pays two process starts in series where the launcher restarts "
  "both at once (cluster / agent below 1 on one machine), and a warm "
  "spare cuts the first of them to about a second.",
  "A warm spare (spare) was started right after the start before, so "
  "the interpreter and the imports (TensorFlow, the trainer) are done "
  "before the kill; what is left after it: the backoff, flags, the "
  "strategy and the job's build, the restore, and the first loop's "
  "tracing.",
  "On one machine no mode pays for rescheduling or an image pull; on "
  "a platform the cluster restart adds those (minutes at scale) and the "
  "agent does not.",
]
