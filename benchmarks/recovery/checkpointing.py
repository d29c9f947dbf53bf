"""App: checkpoint I/O and its training cost (see `checkpointing_lib`).

  python -m benchmarks.recovery.checkpointing       # as in `make bench`
  python -m benchmarks.recovery.checkpointing --io_model=small_cnn \
      --io_image_size=16 --cost_train_steps=20 --cost_checkpoint_every=10 \
      --cost_steps_per_loop=5 --repeats=2              # a smoke run

Its flags have prefixes (io_: the checkpoint I/O section, cost_: the training
cost section) so that they name no flag of another benchmark app: the apps
can be imported side by side.
"""

from benchmarks.harness import cli
from benchmarks.recovery import checkpointing_lib

cli.define_flags(checkpointing_lib.Config, prefix="cost_")

if __name__ == "__main__":
  cli.run_app(
    checkpointing_lib.run,
    checkpointing_lib.Config,
    prefix="cost_",
    progress=cli.write_progress,
  )
