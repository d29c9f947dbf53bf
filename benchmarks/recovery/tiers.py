"""App: checkpoint tiers, save and restore seconds (see `tiers_lib`).

  python -m benchmarks.recovery.tiers                             # small CNN
  python -m benchmarks.recovery.tiers --tiers_model=resnet50 --tiers_image_size=224 \
      --section=checkpoint_tiers_resnet50                 # the opt-in size
"""

from benchmarks.harness import cli
from benchmarks.recovery import tiers_lib

cli.define_flags(tiers_lib.Config, prefix="tiers_")

if __name__ == "__main__":
  cli.run_app(tiers_lib.run, tiers_lib.Config, prefix="tiers_")
