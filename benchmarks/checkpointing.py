"""App: checkpoint I/O and its training cost (see `checkpointing_lib`).

  python -m benchmarks.checkpointing                  # as in `make bench`
  python -m benchmarks.checkpointing --io_model=small_cnn --io_image_size=16 \
      --cost_train_steps=20 --cost_checkpoint_every=10 \
      --cost_steps_per_loop=5 --repeats=2              # a smoke run

Its flags have prefixes (io_: the checkpoint I/O section, cost_: the training
cost section) so that they name no flag of another benchmark app: the apps
can be imported side by side.
"""

from absl import app
from absl import flags

from benchmarks import checkpointing_lib
from benchmarks import cli

flags.DEFINE_enum(
  "io_model",
  "resnet50",
  ["resnet50", "small_cnn"],
  "The trainer's model whose checkpoint save/restore is timed.",
)
flags.DEFINE_integer("io_image_size", 224, "Input side of --io_model.")
flags.DEFINE_enum(
  "cost_model",
  "small_cnn",
  ["resnet50", "small_cnn"],
  "Trainer --model for the training-cost runs.",
)
flags.DEFINE_integer("cost_image_size", 16, "Trainer --image_size.")
flags.DEFINE_integer("cost_batch_size", 32, "Trainer --per_replica_batch_size.")
flags.DEFINE_integer("cost_train_steps", 240, "Steps each round trains.")
flags.DEFINE_integer(
  "cost_checkpoint_every",
  20,
  "Trainer --checkpoint_every_steps and --log_every_steps.",
)
flags.DEFINE_integer("cost_steps_per_loop", 10, "Trainer --steps_per_loop.")
flags.DEFINE_list(
  "cost_variants",
  list(checkpointing_lib.DEFAULT_VARIANTS),
  "Training variants to run, the first being the baseline of "
  "the cost column; from "
  + ", ".join(v.key for v in checkpointing_lib.VARIANTS)
  + ".",
)
flags.DEFINE_integer("trainer_timeout_secs", 180, "Limit for one trainer run.")

FLAGS = flags.FLAGS


def main(argv):
  del argv  # Unused.
  cli.emit(
    checkpointing_lib.run(
      cli.config_from_flags(checkpointing_lib.Config, prefix="cost_"),
      progress=cli.emit if FLAGS.output else None,
    )
  )


if __name__ == "__main__":
  app.run(main)
