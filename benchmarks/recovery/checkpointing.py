"""App: checkpoint I/O and its training cost (see `checkpointing_lib`).

  python -m benchmarks.recovery.checkpointing                  # as in `make bench`
  python -m benchmarks.recovery.checkpointing --io_model=small_cnn --io_image_size=16 \
      --cost_train_steps=20 --cost_checkpoint_every=10 \
      --cost_steps_per_loop=5 --repeats=2              # a smoke run

Its flags have prefixes (io_: the checkpoint I/O section, cost_: the training
cost section) so that they name no flag of another benchmark app: the apps
can be imported side by side.
"""

from absl import app
from absl import flags

from benchmarks.harness import cli
from benchmarks.recovery import checkpointing_lib

cli.define_flags(checkpointing_lib.Config, prefix="cost_")

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
