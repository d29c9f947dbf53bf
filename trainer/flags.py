"""The trainer's command line: every flag, its default, help and bounds.

`trainer.task` adopts these as its own (its `--help` lists them); the flags
that set a `RunOptions` field carry its name, so `trainer.checks` derives the
options from them (`ctl.train.options.from_flags`). Importing this module
loads no TensorFlow, so `--help` and a bad flag answer at once.
"""

import math

from absl import flags

# Light imports (no TensorFlow): the defaults below are declared once, on the
# options they set; tests/test_task.py ties the choice lists to the registries.
from ctl.resilience import watchdog as watchdog_lib
from ctl.train import options as options_lib


def _run(name):
  return options_lib.default(options_lib.RunOptions, name)


def _limit(name):
  return options_lib.default(watchdog_lib.Limits, name)


# Upper bounds of the numeric flags, checked by absl when the flags are
# parsed (before TensorFlow loads): values past them only overflow later
# (int64 steps times the batch, the seed's 32 bits, a timeout's microseconds).
_MAX_STEPS = 10**12
_MAX_BATCH = 2**20
_MAX_IMAGE_SIZE = 4096
_MAX_SEED = 2**32 - 1
_MAX_SECS = 1e9  # About 31 years; threading's longest wait is 9.2e9 s.


flags.DEFINE_string(
  "model_dir",
  "",
  "Run directory: summary, and the default "
  "parent of checkpoints, TensorBoard logs and the export. "
  "Local path or gs://. Default on Vertex AI: from "
  "AIP_MODEL_DIR.",
)
flags.DEFINE_string("job_dir", "", "AI Platform's name for --model_dir.")
flags.DEFINE_string(
  "checkpoint_dir",
  "",
  "Default: <model_dir>/checkpoints, or AIP_CHECKPOINT_DIR.",
)
flags.DEFINE_string(
  "tensorboard_dir",
  "",
  "Default: <model_dir>/tensorboard, or AIP_TENSORBOARD_LOG_DIR.",
)
flags.DEFINE_string(
  "export_dir", "", "Default: <model_dir>/saved_model, or AIP_MODEL_DIR."
)
flags.DEFINE_bool(
  "export",
  True,
  "Write the SavedModel at the end (--noexport: none, e.g. for a tuning "
  "trial; the checkpoints hold the model).",
)
flags.DEFINE_enum(
  "storage",
  _run("storage"),
  ["auto", "fuse", "gcsfs", "tf"],
  "How gs:// directories are written: fuse (the /gcs mount), "
  "gcsfs (staged locally and uploaded), tf (TensorFlow's own "
  "gs:// filesystem); auto: fuse when the bucket is mounted, "
  "else gcsfs.",
)
flags.DEFINE_string(
  "fuse_root", _run("fuse_root"), "Where Cloud Storage FUSE mounts buckets."
)
flags.DEFINE_enum(
  "dataset",
  "digits",
  ["synthetic", "digits", "cassava", "files"],
  "What to train on.",
)
flags.DEFINE_string(
  "data_dir",
  "",
  "TFDS data dir (cassava) or image root "
  "(files: class_name/*.jpg|png); local, /gcs/... or "
  "gs://.",
)
flags.DEFINE_bool(
  "skip_bad_images",
  False,
  "files: leave out images that "
  "cannot be decoded (counted and logged; checked once, when "
  "the file list is made) rather than stop with an error.",
)
flags.DEFINE_integer(
  "max_image_pixels",
  89_478_485,  # trainer.data.MAX_IMAGE_PIXELS, without loading TensorFlow.
  "files: leave out images of more pixels than this, read from their PNG or "
  "JPEG headers without decoding (counted and logged); 0: no limit.",
  lower_bound=0,
)
flags.DEFINE_integer(
  "image_size",
  32,
  "Side of the square model input.",
  lower_bound=8,
  upper_bound=_MAX_IMAGE_SIZE,
)
flags.DEFINE_enum("model", "small_cnn", ["resnet50", "small_cnn"], "Model.")
flags.DEFINE_float("dropout", 0.0, "Dropout rate before the last layer.")
flags.DEFINE_string(
  "weights",
  "none",
  "resnet50 backbone weights: none, "
  "imagenet (downloads) or a local weights file path.",
)
flags.DEFINE_integer(
  "per_replica_batch_size",
  64,
  "Examples per replica per step; the global batch is this times the replicas.",
  upper_bound=_MAX_BATCH,
)
flags.DEFINE_integer(
  "train_steps",
  None,
  "Train until the global step is this (a target, not a count).",
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_integer(
  "epochs",
  None,
  "Alternative to --train_steps: this many passes over the training split.",
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_integer(
  "steps_per_loop",
  _run("steps_per_loop"),
  "Steps per tf.function call.",
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_integer(
  "log_every_steps",
  _run("log_every_steps"),
  "Log and summary interval.",
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_integer(
  "eval_every_steps",
  _run("eval_every_steps"),
  "Evaluation interval (0: only at the end).",
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_integer(
  "checkpoint_every_steps",
  _run("checkpoint_every_steps"),
  "Checkpoint interval in steps (0: none).",
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_string(
  "checkpoint_every_secs",
  f"{_run('checkpoint_every_secs'):g}",
  "Checkpoint interval "
  "in seconds (0: none), or auto: the Young/Daly interval "
  "sqrt(2 x save seconds x MTBF) from the run ledger.",
)
flags.DEFINE_float(
  "expected_mtbf_secs",
  _run("expected_mtbf_secs"),
  "Mean time between failures "
  "that --checkpoint_every_secs=auto assumes until the run "
  "ledger has seen a failure.",
  upper_bound=_MAX_SECS,
)
flags.DEFINE_integer(
  "keep_checkpoints",
  _run("keep_checkpoints"),
  "Checkpoints to keep.",
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_bool(
  "async_checkpoint",
  _run("async_checkpoint"),
  "Write checkpoints in the background.",
)
flags.DEFINE_enum("optimizer", "adam", ["adam", "sgd"], "Optimizer.")
flags.DEFINE_float("learning_rate", 1e-3, "Peak learning rate.")
flags.DEFINE_enum(
  "lr_schedule",
  "constant",
  ["constant", "cosine"],
  "Learning-rate schedule (cosine decays to 0 at the last "
  "step after a linear warmup).",
)
flags.DEFINE_integer(
  "warmup_steps",
  0,
  "Linear warmup steps (cosine).",
  lower_bound=0,
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_enum(
  "strategy",
  "auto",
  ["auto", "one_device", "mirrored", "multi_worker"],
  "tf.distribute "
  "strategy; auto picks multi_worker when TF_CONFIG names "
  "several workers.",
)
flags.DEFINE_enum(
  "collective", "auto", ["auto", "ring", "nccl"], "All-reduce implementation."
)
flags.DEFINE_enum(
  "mixed_precision",
  "none",
  ["none", "bf16", "fp16"],
  "Compute dtype (variables and loss stay float32).",
)
flags.DEFINE_bool("xla", _run("xla"), "Compile the step with XLA.")
flags.DEFINE_string(
  "xla_cache_dir",
  "auto",
  "With --xla: where XLA keeps the programs it compiled, so a restart on "
  "the node compiles nothing it compiled before (TensorFlow's persistent "
  "XLA cache); auto: node-local disk, <tmp>/ctl-xla-cache-<uid>; off: none; "
  "or a directory.",
)
flags.DEFINE_bool(
  "train_accuracy",
  _run("train_metrics"),
  "Count correct predictions at every "
  "step for the logged train accuracy (off: a few ops fewer "
  "per step, no train accuracy).",
)
flags.DEFINE_bool(
  "deterministic",
  False,
  "Bitwise-repeatable ops (tf.config.experimental.enable_op_determinism).",
)
flags.DEFINE_integer(
  "seed",
  _run("seed"),
  "Seed of initialization and data order.",
  lower_bound=0,
  upper_bound=_MAX_SEED,
)
flags.DEFINE_integer(
  "max_nan_recoveries",
  _run("max_nan_recoveries"),
  "Rollbacks allowed after a non-finite loss.",
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_bool(
  "reshuffle_on_nan",
  _run("reshuffle_on_nan"),
  "Use a new data order after a rollback.",
)
flags.DEFINE_float(
  "stall_timeout_secs",
  _limit("stall_timeout_secs"),
  "Stall watchdog: a phase "
  "(train loop, evaluation, checkpoint save or upload, "
  "export) that makes no progress this long ends the "
  "worker with exit code 75. Default: adaptive, 10x the "
  "slowest run of that phase so far, at least 120 s; 0 "
  "turns the watchdog off.",
  lower_bound=0,
  upper_bound=_MAX_SECS,
)
flags.DEFINE_float(
  "startup_timeout_secs",
  _limit("startup_timeout_secs"),
  "Stall watchdog limit for "
  "start-up (waiting for peers, building, restoring) and "
  "the first run of each phase (tracing).",
  lower_bound=1,
  upper_bound=_MAX_SECS,
)
flags.DEFINE_float(
  "lease_stale_secs",
  _run("lease_stale_secs"),
  "The chief holds a lease on --model_dir while it trains, renewed every "
  "quarter of this, at most 5 s apart, and recorded in it; a lease not renewed for its "
  "holder's value of this (a dead holder on another host) may be taken "
  "over by another trainer; one whose holder is alive on this host never.",
  upper_bound=_MAX_SECS,
)
flags.DEFINE_bool(
  "take_over_lease",
  _run("take_over_lease"),
  "Take the lease on --model_dir even if another trainer holds it: only "
  "when you know that trainer is dead.",
)
flags.DEFINE_string(
  "local_checkpoints",
  _run("local_checkpoints"),
  "Where each worker keeps its newest checkpoints on its own node, for a "
  "fast restore: auto (under a job id, as ctl-launch and Vertex AI set: a "
  "RAM disk, /dev/shm, with room for two checkpoints, else local disk; "
  "without one, none, since no restart could find it), ram, disk, an "
  "absolute directory, or off (the bucket only).",
)
flags.DEFINE_integer(
  "local_checkpoint_every_steps",
  _run("local_checkpoint_every_steps"),
  "Local checkpoint interval in steps (0: every loop of --steps_per_loop); "
  "--checkpoint_every_steps/secs say when one is copied to the bucket.",
  upper_bound=_MAX_STEPS,
)
flags.DEFINE_string(
  "hypertune_metric",
  "",
  "Report this eval metric "
  "(accuracy or loss) to Vertex AI hyperparameter tuning "
  "after each evaluation.",
)
flags.DEFINE_string(
  "profile_steps",
  "",
  "START,END: capture a TensorFlow "
  "profiler trace of global steps START to END on the "
  "chief, into <tensorboard_dir>/train/plugins/profile "
  "(TensorBoard's Profile tab). Steps run steps_per_loop "
  "at a time in one tf.function call, so the trace covers "
  "every whole call that overlaps the range.",
)
flags.DEFINE_bool(
  "dry_run",
  False,
  "Validate the flags, print the resolved configuration and exit.",
)

# absl's bounds let nan through (every comparison with it is false).
for _name in (
  "dropout",
  "learning_rate",
  "expected_mtbf_secs",
  "stall_timeout_secs",
  "startup_timeout_secs",
  "lease_stale_secs",
):
  flags.register_validator(
    _name,
    lambda value: value is None or math.isfinite(value),
    message="not a finite number",
  )
flags.register_validator(
  "dropout", lambda rate: 0 <= rate < 1, message="not a rate in [0, 1)"
)

# --helpfull lists the trainer's flags by topic (`help_by_topic`), not in
# one alphabetical group of 48; each flag above is in exactly one topic
# (tests/test_console_scripts.py).
TOPICS = (
  (
    "Outputs and storage",
    (
      "model_dir",
      "job_dir",
      "checkpoint_dir",
      "tensorboard_dir",
      "export_dir",
      "export",
      "storage",
      "fuse_root",
    ),
  ),
  (
    "Data",
    (
      "dataset",
      "data_dir",
      "skip_bad_images",
      "max_image_pixels",
      "image_size",
    ),
  ),
  (
    "Model and optimizer",
    (
      "model",
      "dropout",
      "weights",
      "optimizer",
      "learning_rate",
      "lr_schedule",
      "warmup_steps",
    ),
  ),
  (
    "Steps, batches and the schedule of duties",
    (
      "per_replica_batch_size",
      "train_steps",
      "epochs",
      "steps_per_loop",
      "log_every_steps",
      "eval_every_steps",
      "train_accuracy",
      "seed",
      "deterministic",
    ),
  ),
  (
    "Checkpoints, restarts and the run's lease",
    (
      "checkpoint_every_steps",
      "checkpoint_every_secs",
      "expected_mtbf_secs",
      "keep_checkpoints",
      "async_checkpoint",
      "local_checkpoints",
      "local_checkpoint_every_steps",
      "lease_stale_secs",
      "take_over_lease",
    ),
  ),
  (
    "Distribution and speed",
    ("strategy", "collective", "mixed_precision", "xla", "xla_cache_dir"),
  ),
  (
    "Failures and stalls",
    (
      "max_nan_recoveries",
      "reshuffle_on_nan",
      "stall_timeout_secs",
      "startup_timeout_secs",
    ),
  ),
  (
    "Tuning, profiling and checks",
    ("hypertune_metric", "profile_steps", "dry_run"),
  ),
)


def help_by_topic(flag_values: flags.FlagValues = flags.FLAGS) -> str:
  """The trainer's flags by topic (`TOPICS`), then every other module's
  flags (absl's own) as absl lists them: what --helpfull prints."""
  parts = []
  for topic, names in TOPICS:
    for name in names:
      flag_values.register_key_flag_for_module(topic, flag_values[name])
    parts.append(flag_values.module_help(topic))
  for module in sorted(flag_values.flags_by_module_dict()):
    if module != __name__:
      parts.append(flag_values.module_help(module))
  # --flagfile and --undefok: absl lists them last, as module absl.flags.
  full = flag_values.get_help()
  special = full.find("\nabsl.flags:\n")
  return "\n".join(parts) + (full[special:] if special >= 0 else "")
