"""App: checkpoint tiers, save and restore seconds (see `tiers_lib`).

  python -m benchmarks.tiers                             # small CNN
  python -m benchmarks.tiers --tiers_model=resnet50 --tiers_image_size=224 \
      --section=checkpoint_tiers_resnet50                 # the opt-in size
"""

from absl import app
from absl import flags

from benchmarks import cli
from benchmarks import tiers_lib

flags.DEFINE_enum(
  "tiers_model",
  "small_cnn",
  ["small_cnn", "resnet50"],
  "The trainer's model whose checkpoint is saved and restored.",
)
flags.DEFINE_integer("tiers_image_size", 16, "Input side of --tiers_model.")
flags.DEFINE_integer(
  "tiers_goodput_kills",
  0,
  "Also measure goodput under this many SIGKILLs of a worker (0: do not), "
  "three ways: whole-cluster restart and agents with warm spares, bucket "
  "only; agents with warm spares and the local tier.",
)
flags.DEFINE_integer(
  "tiers_goodput_kill_every", 45, "Steps between two SIGKILLs."
)
flags.DEFINE_bool(
  "tiers_model_restarts",
  False,
  "Also time one restart of --tiers_model per way of coming back "
  "(whole cluster; agents with warm spares) and give the goodput model at "
  "a kill every 5 and 30 minutes from them.",
)
flags.DEFINE_string(
  "tiers_local_root",
  "auto",
  "Where the local tier is: auto, ram, disk or a directory (as the "
  "trainer's --local_checkpoints).",
)


def main(argv):
  del argv  # Unused.
  cli.emit(
    tiers_lib.run(cli.config_from_flags(tiers_lib.Config, prefix="tiers_"))
  )


if __name__ == "__main__":
  app.run(main)
