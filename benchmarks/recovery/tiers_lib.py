"""Checkpoint tiers: how long a save blocks the step and a restore takes,
from the local tier, from a peer, and from the bucket.

The model's checkpoint (model and Adam state, as the trainer saves them),
saved and restored with the framework's own code: a bucket save is today's
synchronous one (a `ctl.checkpointing.Checkpointer` into a gs:// location's
staging directory, then `publish(commit_file="checkpoint")` through gcsfs to
gcp-storage-emulator on loopback, as the controller does without tiers); a
tiered save is `ctl.local_tier.LocalTier.save` (what the step waits for),
after which the copy to the bucket runs on a thread (`copy_to_bucket`, then
the same publish), timed apart. Restores read the same checkpoint from the
local tier, from a peer (`ctl.checkpoint.tiers.peer_tier` on loopback, fetched into an
empty tier by `ctl.peer_tier.fetch_from_peer`), and from the bucket (a
fresh read-only location's `fetch()`). Rounds repeat the whole sequence;
the report gives medians with min-max, and the issue's targets as ratios.
"""

from collections.abc import Callable
import dataclasses
import os
import signal
import statistics
import tempfile
import time

from absl import logging
import tensorflow as tf

from benchmarks.harness import budget as budget_lib
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings
from benchmarks.harness import stats
from benchmarks.recovery import checkpointing_lib
from benchmarks.recovery import goodput_model_lib
from benchmarks.recovery import restart_lib
from benchmarks.workloads import save_cost as save_cost_lib
from ctl.checkpoint import checkpointing
from ctl.checkpoint.tiers import bucket_tier
from ctl.checkpoint.tiers import local_tier
from ctl.checkpoint.tiers import node_tiers
from ctl.checkpoint.tiers import peer_tier
from ctl.io import storage
from ctl.launch import spare
from ctl.testing import events as events_lib
from ctl.testing import gcs_emulator
from ctl.testing import run_files
from trainer import testing as trainer_testing

BUCKET = "ctl-bench"
# (row key, row name), in the report's order.
ROWS = (
  ("save_local", "save, local tier (blocks the step)"),
  ("write_local", "its write and commit to the local tier (background)"),
  (
    "save_local_first",
    "a process's first two local saves (set up the host copy, once a start)",
  ),
  ("copy_background", "copy of that save to gs:// (background)"),
  ("save_bucket", "save, gs:// (today: blocks the step)"),
  ("restore_local", "restore, local tier"),
  ("restore_peer", "restore, from a peer"),
  ("restore_bucket", "restore, gs://"),
)


@dataclasses.dataclass(frozen=True)
class Config(settings.Rounds):
  """One tiers benchmark run.

  Its `settings.flag` fields are the flags of `tiers.py`, prefixed tiers_.
  """

  model: str = settings.flag(
    "small_cnn",
    "The trainer's model whose checkpoint is saved and restored.",
    choices=("small_cnn", "resnet50"),
  )
  image_size: int = settings.flag(16, "Input side of --tiers_model.")
  num_classes: int = 5
  local_root: str = settings.flag(
    "auto",
    "Where the local tier is: auto, ram, disk or a directory (as the "
    "trainer's --local_checkpoints).",
  )
  device: str = "auto"
  section: str = "checkpoint_tiers"
  goodput_kills: int = settings.flag(
    0,
    "Also measure goodput under this many SIGKILLs of a worker (0: do not), "
    "three ways: whole-cluster restart and agents with warm spares, bucket "
    "only; agents with warm spares and the local tier.",
  )
  # Just under the bucket's interval (_BUCKET_EVERY, 50 steps): a kill
  # without the local tier loses most of one.
  goodput_kill_every: int = settings.flag(45, "Steps between two SIGKILLs.")
  # For the goodput model's restart seconds (the ResNet50 section's).
  model_restarts: bool = settings.flag(
    False,
    "Also time one restart of --tiers_model per way of coming back "
    "(whole cluster; agents with warm spares) and give the goodput model at "
    "a kill every 5 and 30 minutes from them.",
  )


def run(config: Config, progress: Callable[[dict], None] | None = None) -> dict:
  """Measures every round, then builds the sections.

  With `config.time_budget_secs`, the save and restore rounds after the
  first are cut to those that fit it (never below 1); the killed goodput
  runs are one measurement each and are not cut.

  Returns:
    {config.section: save and restore seconds}, and with `goodput_kills`
    {config.section + "_goodput": goodput under those kills}.
  """
  del progress  # One section, emitted once.
  budget = budget_lib.Budget(config.time_budget_secs)
  with (
    tempfile.TemporaryDirectory(prefix="ctl_bench_tiers_") as workdir,
    gcs_emulator.serve(
      data_dir=os.path.join(workdir, "emulator"), bucket=BUCKET
    ),
  ):
    checkpoint, device = _checkpoint(config)
    root = node_tiers.choose_root(config.local_root, need_bytes=0)
    times, megabytes = (
      {"save_local_first": [_first_saves(checkpoint, root)]},
      0.0,
    )
    for index in budget.each_round(config.repeats):
      tier_dir = tempfile.mkdtemp(prefix="bench-", dir=root)
      measured, megabytes = _round(checkpoint, workdir, tier_dir, index)
      local_tier.LocalTier(tier_dir).remove()
      for key, seconds in measured.items():
        times.setdefault(key, []).append(seconds)
      logging.info("tiers round %d: %s", index + 1, measured)
    sections = {
      config.section: budget.stamp(
        _section(config, times, megabytes, device, root)
      )
    }
    if config.goodput_kills:
      found = {
        name: _killed_run(config, os.path.join(workdir, f"run{i}"), mode, t)
        for i, (name, mode, t) in enumerate(GOODPUT_MODES)
      }
      sections[f"{config.section}_goodput"] = _goodput_section(config, found)
      sections[f"{config.section}_model"] = goodput_model_lib.checked_section(
        found=found,
        modes=GOODPUT_MODES,
        save_local=statistics.median(times["save_local"]),
        save_bucket=statistics.median(times["save_bucket"]),
        config=dataclasses.asdict(config),
      )
    if config.model_restarts:
      sections[f"{config.section}_model"] = _restarts_model(
        config, times, root, workdir
      )
  return sections


# The goodput runs' loop (the local tier saves after each) and bucket saves.
_LOOP, _BUCKET_EVERY = 5, 50
# (row, how workers come back, --local_checkpoints) of the goodput runs.
GOODPUT_MODES = (
  ("cluster, bucket only", "cluster", "off"),
  ("agent + spare, bucket only", "spare", "off"),
  ("agent + spare + local tier", "spare", "auto"),
)


def _killed_run(config: Config, root: str, mode: str, tiers: str) -> dict:
  """Two workers (small CNN) killed `goodput_kills` times; their goodput."""
  os.makedirs(root)
  model_dir = os.path.join(root, "run")
  events = f"{model_dir}.events.jsonl"
  steps = (config.goodput_kills + 1) * config.goodput_kill_every + 5
  worker = trainer_testing.trainer_command(
    "--dataset=digits",
    "--model=small_cnn",
    "--image_size=8",
    "--per_replica_batch_size=8",
    f"--train_steps={steps}",
    f"--steps_per_loop={_LOOP}",
    f"--log_every_steps={_LOOP}",
    f"--checkpoint_every_steps={_BUCKET_EVERY}",
    "--eval_every_steps=0",
    f"--local_checkpoints={tiers}",
    f"--model_dir={model_dir}",
  )
  launchers = restart_lib.launch(
    mode, restart_lib.Config(), model_dir, worker=worker
  )
  try:
    killed, warm = _kill_every(config, launchers, events, mode)
    for launcher in launchers:
      code, output = trainer_testing.finish(launcher, timeout=600)
      if code:
        raise RuntimeError(f"{mode} exited {code}:\n{output[-2000:]}")
  finally:
    restart_lib.stop(launchers)
  goodput = run_files.read_summary(model_dir)["goodput"]
  return {
    "goodput_percent": goodput["goodput_percent"],
    "lost_steps_per_kill": goodput["lost_steps"] / config.goodput_kills,
    "seconds": goodput["total_seconds"],
    "spare_warm_at_kills": warm,
    "costs": goodput_model_lib.measured(
      model_dir,
      restarts=goodput_model_lib.seconds_to_resume(events, killed),
      save_every_steps=_BUCKET_EVERY if tiers == "off" else _LOOP,
    ),
  }


def _kill_every(
  config: Config, launchers: list, events: str, mode: str
) -> tuple[list[float], int | None]:
  """SIGKILLs worker 1 at every multiple of `goodput_kill_every` steps.

  A kill does not wait for worker 1's spare to be warm: its imports take
  seconds of CPU beside two busy workers, longer than the run's steps
  between kills (a warm spare is what a kill every few minutes finds), and
  a spare handed a restart early finishes them at the worker's priority.

  Returns:
    When each kill was sent (`time.monotonic()`), and how many kills found
    worker 1's spare warm (None without spares).

  Raises:
    RuntimeError: the run ended first (with the end of its output).
  """
  killed, warm = [], 0
  try:
    for kill in range(1, config.goodput_kills + 1):
      step = kill * config.goodput_kill_every
      events_lib.wait_for_step(events, step, process=launchers[0])
      # Worker 1 too: until its process of this attempt marks a loop, its
      # newest mark names the one killed before (ProcessLookupError).
      events_lib.wait_for_step(events, step, process=launchers[0], worker=1)
      if mode == "spare":  # Worker 1's spare for this restart is the kill-th.
        output = trainer_testing.output_so_far(launchers[1])
        warm += output.count(spare.READY_LINE) >= kill
      # Worker 1's newest mark names its process (a spare's, after a
      # restart with --warm_spare).
      marks = [e for e in events_lib.read_events(events) if e["worker"] == 1]
      os.kill(marks[-1]["pid"], signal.SIGKILL)
      killed.append(time.monotonic())
  except AssertionError as e:
    output = trainer_testing.output_so_far(launchers[0])[-2000:]
    raise RuntimeError(f"{mode}: {e}\n{output}") from None
  return killed, warm if mode == "spare" else None


def _goodput_section(config: Config, found: dict) -> dict:
  rows = [
    {"name": name, **{k: v for k, v in found[name].items() if k != "costs"}}
    for name, _, _ in GOODPUT_MODES
  ]
  tiers, bucket = GOODPUT_MODES[2][0], GOODPUT_MODES[1][0]
  return report_lib.section(
    title=(
      f"Goodput under a SIGKILL every {config.goodput_kill_every} steps "
      f"({config.goodput_kills} kills, small CNN, 2 workers on loopback)"
    ),
    rows=rows,
    chart_key="goodput_percent",
    columns=["name", "goodput_percent", "lost_steps_per_kill", "seconds"],
    targets=[
      goodput_model_lib.above(
        "steps lost per kill with the local tier: at most one local "
        f"interval ({_LOOP} steps), margin",
        _LOOP - found[tiers]["lost_steps_per_kill"],
        0.0,
      ),
    ],
    notes=[
      "One run each: worker 1's trainer SIGKILLed at every multiple of "
      f"{config.goodput_kill_every} steps; the bucket saves every "
      f"{_BUCKET_EVERY} steps, "
      f"the local tier every loop ({_LOOP} steps). Goodput and lost steps are the "
      "chief's train_summary.json (the run ledger's accounting). The "
      "goodput of one run each moves by a restart's spread (seconds), more "
      "than the tier gains a kill, so only the steps it saves have a target "
      "(docs/benchmarks.md, 'Targets changed, and why').",
      f"Lost steps per kill: {found[bucket]['lost_steps_per_kill']:g} with "
      f"the bucket only, {found[tiers]['lost_steps_per_kill']:g} with the "
      f"local tier (at most one local interval: {_LOOP}).",
      "Kills that found worker 1's spare warm: "
      + ", ".join(
        f"{found[name]['spare_warm_at_kills']} of {config.goodput_kills} "
        f"({name})"
        for name, mode, _ in GOODPUT_MODES
        if mode == "spare"
      )
      + "; a spare not yet warm finishes its imports after the hand-over.",
    ],
    config=dataclasses.asdict(config),
  )


def _checkpoint(config: Config) -> tuple[tf.train.Checkpoint, str]:
  checkpoint, device = checkpointing_lib.model_checkpoint(
    model=config.model,
    image_size=config.image_size,
    num_classes=config.num_classes,
    device=config.device,
  )
  return checkpoint, device.description


def _restarts_model(config: Config, times: dict, root: str, workdir: str):
  """The goodput model at 5 and 30 minutes from timed restarts of the
  model and this run's saves, a local save's cost measured in training."""
  seconds = {key: statistics.median(times[key]) for key in times}
  # At the restarts' image size: the checkpoint's is the same.
  seconds["save_local_in_training"] = save_cost_lib.seconds_per_save(
    model=config.model,
    image_size=restart_lib.IMAGE_SIZES[config.model],
    root=root,
  )["in_training"]
  return goodput_model_lib.restarts_section(
    model=config.model,
    modes=GOODPUT_MODES,
    restarts=goodput_model_lib.timed_restarts(
      config.model, os.path.join(workdir, "restarts"), timeout=600
    ),
    seconds=seconds,
    config=dataclasses.asdict(config),
  )


_ASYNC = tf.train.CheckpointOptions(enable_async=True)


def _first_saves(checkpoint, root: str) -> float:
  """Seconds of a process's first two asynchronous local saves, written:
  they set up and trace the host copy that later saves reuse."""
  checkpointing.prepare_async_checkpoints()
  tier = local_tier.LocalTier(tempfile.mkdtemp(prefix="bench-first-", dir=root))
  start = time.perf_counter()
  for step in (1, 2):
    tier.write(checkpoint, step, options=_ASYNC)
    checkpoint.sync()
  seconds = time.perf_counter() - start
  tier.remove()
  return seconds


def _round(checkpoint, workdir: str, tier_dir: str, index: int):
  """One round: ({key: seconds}, checkpoint MB)."""
  seconds, step = {}, index + 1
  tier = local_tier.LocalTier(tier_dir)
  # As the trainer's tiered save: an asynchronous write, committed once its
  # files are written (ctl.checkpoint.tiers.checkpoint_tiers).
  seconds["save_local"] = _timed(
    lambda: tier.write(checkpoint, step, options=_ASYNC)
  )
  seconds["write_local"] = _timed(lambda: (checkpoint.sync(), tier.adopt(step)))
  url = f"gs://{BUCKET}/round{index}/checkpoints"
  staging = os.path.join(workdir, f"staging{index}")
  location = storage.open_location(url, storage="gcsfs", staging_dir=staging)

  def copy():
    bucket_tier.copy_to_bucket(
      tier.directory, step=step, bucket_dir=location.local_path, keep=1
    )
    location.publish(commit_file=checkpointing.STATE_FILE)

  seconds["copy_background"] = _timed(copy)
  location.close()
  location = storage.open_location(
    f"{url}-sync", storage="gcsfs", staging_dir=f"{staging}-sync"
  )
  saver = checkpointing.Checkpointer(
    checkpoint=checkpoint,
    directory=location.local_path,
    is_chief=True,
    keep=1,
    on_saved=lambda: location.publish(commit_file=checkpointing.STATE_FILE),
  )
  seconds["save_bucket"] = _timed(saver.save, step)
  location.close()
  seconds.update(_restores(checkpoint, tier, url, step, workdir))
  megabytes = sum(tier.entries()[-1].files.values()) / 1e6
  return seconds, megabytes


def _restores(checkpoint, tier, url: str, step: int, workdir: str) -> dict:
  """Seconds to restore `step` from the tier, a peer, and the bucket."""
  seconds = {}
  read = lambda prefix: checkpoint.read(
    prefix
  ).assert_existing_objects_matched()
  seconds["restore_local"] = _timed(read, tier.prefix(step))
  service = peer_tier.TierService()
  try:
    node_tiers.write_pointer(
      service.pointer, directory=tier.directory, bucket_dir="", keep=1
    )
    empty = local_tier.LocalTier(tempfile.mkdtemp(dir=workdir))

    def from_peer():
      address = f"127.0.0.1:{service.port}"
      if not peer_tier.fetch_from_peer(empty, step, address=address):
        raise RuntimeError("the peer fetch failed")
      read(empty.prefix(step))

    seconds["restore_peer"] = _timed(from_peer)
  finally:
    service.close(remove_tier=False)
  reader = storage.open_location(url, storage="gcsfs", read_only=True)

  def from_bucket():
    reader.fetch()
    read(os.path.join(reader.local_path, f"ckpt-{step}"))

  seconds["restore_bucket"] = _timed(from_bucket)
  reader.close()
  return seconds


# A restore from gs:// moves the checkpoint's bytes; from the local tier it
# reads them from RAM. Where the bytes dominate (ResNet50's 308 MB: 10.3x
# measured) the local tier must be >= 3x faster; a checkpoint of a few MB
# restores in tens of milliseconds either way, its time the fixed costs of
# reading a checkpoint (state file, index, the restore's graph), so there
# the local tier need only be no slower (docs/benchmarks.md).
_RESTORE_BYTES_DOMINATE_MB = 50.0


def _restore_target(megabytes: float) -> float:
  """The least restore gs:// / local ratio for a checkpoint this size."""
  return 3.0 if megabytes >= _RESTORE_BYTES_DOMINATE_MB else 1.0


def _section(config, times, megabytes, device, root) -> dict:
  rows = [
    {"name": name, **stats.spread_fields("seconds", times[key])}
    for key, name in ROWS
  ]
  names = dict(ROWS)
  ratios, targets = [], []
  for what, slow, fast, threshold in (
    ("save blocks", "save_bucket", "save_local", 5.0),
    ("restore", "restore_bucket", "restore_local", _restore_target(megabytes)),
    ("restore", "restore_bucket", "restore_peer", 1.0),
  ):
    ratio = stats.ratio(
      name=f"{what}: {names[slow]} / {names[fast]}",
      numerator=names[slow],
      numerator_values=times[slow],
      denominator=names[fast],
      denominator_values=times[fast],
    )
    ratios.append(ratio)
    targets.append(
      stats.verdict(
        ratio, threshold=threshold, name=f"{ratio['name']} >= {threshold:g}"
      )
    )
  return report_lib.section(
    title=(
      f"Checkpoint tiers: {config.model} ({megabytes:.3g} MB), local tier "
      "vs peer vs gs:// through gcsfs"
    ),
    rows=rows,
    ratios=ratios,
    targets=targets,
    notes=_notes(root, megabytes),
    chart_key="seconds",
    columns=["name", "seconds"],
    config={
      "model": config.model,
      "image_size": config.image_size,
      "checkpoint_megabytes": megabytes,
      "repeats": config.repeats,
      "local_root": root,
      "device": device,
      "median_save_local": statistics.median(times["save_local"]),
    },
  )


def _notes(root: str, megabytes: float) -> list[str]:
  return [
    f"The local tier is in {root}; one checkpoint is {megabytes:.3g} MB "
    "(the tier keeps two per worker).",
    "A tiered save blocks the step while the variables are snapshotted on "
    "the host (TensorFlow's asynchronous checkpoint); their write to the "
    "local tier (write_local) and then the copy to the bucket "
    "(copy_background) run on threads while training goes on. A process's "
    "first two saves also set up the host copy (save_local_first).",
    "Cloud Storage is gcp-storage-emulator on loopback (a single-threaded "
    "Python server on local disk); the peer is a loopback HTTP service, so "
    "neither includes a real network's latency or bandwidth.",
  ]


def _timed(fn, *args) -> float:
  start = time.perf_counter()
  fn(*args)
  return time.perf_counter() - start
