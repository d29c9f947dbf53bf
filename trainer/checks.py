"""Every check of the trainer's configuration that needs no TensorFlow.

`trainer.task` runs `check` before it imports anything that loads TensorFlow,
so a mistake in the flags, the environment or the output directories answers
in well under two seconds, with nothing written. `trainer.job` builds the
job from the same functions once TensorFlow is loaded.
"""

from collections.abc import Mapping
import dataclasses
import math
import os
import tempfile
from typing import Any

from absl import flags
from absl import logging

from ctl import UserError
from ctl.distributed import environment as environment_lib
from ctl.io import outputs
from ctl.resilience import lease
from ctl.resilience import watchdog
from ctl.train import options as options_lib
from ctl.train.options import RunOptions

# The log line that says `check` passed (once per start of the trainer).
PASSED = "Start-up checks passed"


def check(config: Any, environ: Mapping[str, str]) -> None:
  """Raises UserError for the first thing a user must fix.

  Args:
    config: an object with one attribute per trainer flag.
    environ: the process environment (TF_CONFIG, AIP_*, ...).
  """
  check_flags(config)
  platform = environment(config, environ)
  dirs = platform.dirs
  outputs.check_reachable(
    dirs,
    is_chief=platform.is_chief,
    storage_route=config.storage,
    fuse_root=config.fuse_root,
  )
  if platform.is_chief:
    outputs.check_writable(dirs, fuse_root=config.fuse_root)
  # With --epochs the step target is known once the data is loaded; any
  # target >= 0 passes, so 0 stands in for it here.
  options = run_options(config, platform, train_steps=config.train_steps or 0)
  options.validate()
  if not config.dry_run:  # Before TensorFlow loads: refused in a second.
    lease.check_free(options.lease_terms())
  logging.info("%s: flags, cluster, output directories, lease.", PASSED)


def check_flags(config: Any) -> None:
  """Checks flag values on their own."""
  if config.per_replica_batch_size <= 0:
    raise UserError(
      "--per_replica_batch_size must be > 0, got "
      f"{config.per_replica_batch_size}."
    )
  if config.train_steps is None and config.epochs is None:
    raise UserError("Set --train_steps or --epochs.")
  if config.train_steps is not None and config.epochs is not None:
    raise UserError("Set --train_steps or --epochs, not both.")
  if config.epochs is not None and config.epochs <= 0:
    raise UserError(f"--epochs must be > 0, got {config.epochs}.")
  if config.learning_rate <= 0:
    raise UserError(f"--learning_rate must be > 0, got {config.learning_rate}.")
  profile_steps(config.profile_steps)
  every_secs(config.checkpoint_every_secs)
  watchdog_limits(config).validate()
  if config.hypertune_metric not in ("", "accuracy", "loss"):
    raise UserError(
      "--hypertune_metric must be accuracy or loss, got "
      f"{config.hypertune_metric!r}."
    )
  check_weights(name=config.model, weights=config.weights)


def profile_steps(text: str) -> tuple[int, int] | None:
  """Parses --profile_steps=START,END (checked further by RunOptions)."""
  if not text:
    return None
  parts = text.split(",")
  if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
    raise UserError(
      "--profile_steps must be START,END (two step numbers, "
      f"e.g. 100,110), got {text!r}."
    )
  return int(parts[0]), int(parts[1])


def every_secs(value: str) -> float | str:
  """--checkpoint_every_secs: "auto" or a number of seconds."""
  if value == "auto":
    return value
  try:
    seconds = float(value)
    if not math.isfinite(seconds):
      raise ValueError(value)
    return seconds
  except ValueError:
    raise UserError(
      "--checkpoint_every_secs must be auto or a number of "
      f"seconds, got {value!r}."
    ) from None


def watchdog_limits(config: Any) -> watchdog.Limits:
  return options_lib.from_flags(watchdog.Limits, config)


def hparams(config: Any, *, global_batch: int, train_steps: int) -> dict:
  """The options that make runs differ, for TensorBoard's HParams dashboard.

  Names are the trainer's flag names (as hyperparameter tuning passes them),
  plus the global batch and the resolved number of steps.
  """
  values = {
    name: getattr(config, name)
    for name in (
      "model",
      "dataset",
      "image_size",
      "weights",
      "dropout",
      "optimizer",
      "learning_rate",
      "lr_schedule",
      "warmup_steps",
      "per_replica_batch_size",
      "mixed_precision",
      "xla",
      "steps_per_loop",
      "seed",
    )
  }
  return {
    **values,
    "global_batch_size": global_batch,
    "train_steps": train_steps,
  }


def check_weights(*, name: str, weights: str) -> None:
  """Checks `weights` for model `name` without loading anything.

  The trainer calls it up front, so a missing file fails before any data is
  loaded; `trainer.model.build_model` calls it too.

  Raises:
    UserError: weights for a model other than resnet50, or a weights file
      that does not exist.
  """
  if name != "resnet50":
    if weights != "none":
      raise UserError(
        f"--weights applies to resnet50 only; {name} starts "
        "from random weights."
      )
  elif weights not in ("none", "imagenet") and not os.path.isfile(weights):
    raise UserError(
      f"Weights file {weights} not found; pass --weights=none, "
      "imagenet or the path of a local weights file."
    )


def environment(
  config: Any, environ: Mapping[str, str]
) -> environment_lib.Environment:
  """The platform's environment and the output directory flags, without
  TensorFlow: the path every `ctl.environment` user takes."""
  flags = {name: getattr(config, name) for name in outputs.DIR_FLAGS}
  return environment_lib.resolve(**flags, environ=environ)


def describe(config: Any, environ: Mapping[str, str]) -> dict:
  """What a run would do (`--dry_run`, e.g. to check a container's default
  command), after `check`: the cluster, the output directories and the
  flags, without TensorFlow, data or any write."""
  platform = environment(config, environ)
  return {
    "cluster": dataclasses.asdict(platform.cluster),
    "output_dirs": dataclasses.asdict(platform.dirs),
    "flags": vars(config),
  }


def run_options(
  config: Any, platform: environment_lib.Environment, **known
) -> RunOptions:
  """The ctl.RunOptions the flags ask for (not yet validated).

  An option takes the flag of its name; `options_set_otherwise` gives the
  rest from `platform` and `known`, its keyword arguments (declared there
  only).
  """
  return options_lib.from_flags(
    RunOptions, config, **options_set_otherwise(config, platform, **known)
  )


def options_set_otherwise(
  config: Any,
  platform: environment_lib.Environment,
  *,
  train_steps: int,
  global_batch: int = 0,
) -> dict[str, Any]:
  """The RunOptions that are not the value of the flag of their name.

  They come from the platform's environment (its `option_values`, as for
  any `ctl.environment` user) or what the data tells, or are a flag's text
  parsed; tests/test_task.py checks that every other option has a flag of
  its name, so a new option cannot be forgotten. `global_batch` (known once
  the strategy exists) only labels the run in TensorBoard's HParams; 0
  stands in for it in the early checks.
  """
  return {
    **platform.option_values(),
    "train_steps": train_steps,
    # The trainer's one train metric is its accuracy.
    "train_metrics": config.train_accuracy,
    "checkpoint_every_secs": every_secs(config.checkpoint_every_secs),
    "profile_steps": profile_steps(config.profile_steps),
    "hparams": hparams(
      config, global_batch=global_batch, train_steps=train_steps
    ),
    "start_flags": start_flags(config),
  }


def xla_cache_dir(config: Any) -> str | None:
  """The directory of TensorFlow's persistent XLA cache for this start
  (--xla_cache_dir), None without --xla or when it is off.

  "auto" is node-local disk, shared by the runs of this user on the node:
  a program is found by its computation's fingerprint, so a restart (or
  another run of the same model) loads what an earlier start compiled.
  """
  setting = config.xla_cache_dir
  if not config.xla or setting == "off":
    return None
  if setting == "auto":
    return os.path.join(tempfile.gettempdir(), f"ctl-xla-cache-{os.getuid()}")
  return setting


def start_flags(config: Any) -> tuple[str, ...]:
  """The trainer's effective flags as a flagfile's lines, sorted: every flag
  `trainer.flags` defines with its value in `config` (given or default), so
  the flagfile starts the same run again even if a default changes."""
  from . import flags as trainer_flags  # pylint: disable=g-import-not-at-top

  lines = []
  for flag in flags.FLAGS.get_flags_for_module(trainer_flags.__name__):
    value = getattr(config, flag.name, flag.default)
    if isinstance(value, bool):
      lines.append(f"--{'' if value else 'no'}{flag.name}")
    elif value is not None:
      lines.append(f"--{flag.name}={value}")
  return tuple(sorted(lines))
