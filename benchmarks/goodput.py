"""App: goodput under faults, ctl vs Keras BackupAndRestore (`goodput_lib`).

python -m benchmarks.goodput --kills=2 --epochs=4
"""

from absl import flags

from benchmarks import cli
from benchmarks import goodput_lib

flags.DEFINE_integer("epochs", 4, "Passes over the digits training split.")
flags.DEFINE_integer(
  "checkpoint_every",
  20,
  "Steps between checkpoints (ctl) and backups (Keras save_freq).",
)
flags.DEFINE_integer("kills", 2, "SIGKILLs per faulty run.")
flags.DEFINE_integer("kill_seed", 0, "Seed of the kill schedule.")
flags.DEFINE_integer("image_size", 16, "Image side.")
flags.DEFINE_integer("batch_size", 32, "Global batch.")
flags.DEFINE_float(
  "backoff_secs",
  1.0,
  "Wait before the first restart; doubles every restart (both systems).",
)
flags.DEFINE_integer("run_timeout_secs", 300, "Limit for one run.")
flags.DEFINE_enum(
  "restart_model",
  "resnet50",
  ["resnet50", "small_cnn", "none"],
  "Model whose restart cost (process start to the first "
  "resumed step) is split into imports, build, restore and "
  "tracing; none skips it.",
)
flags.DEFINE_integer("restart_image_size", 224, "Image side for it.")
flags.DEFINE_integer("restart_batch_size", 8, "Batch for it.")


if __name__ == "__main__":
  cli.run_app(goodput_lib.run, goodput_lib.Config)
