"""App: the trainer on 1 vs 2 local workers (see `scaling_lib`).

  python -m benchmarks.speed.scaling --repeats=3
  python -m benchmarks.speed.scaling --model=resnet50 --image_size=224 \
      --per_replica_batch_size=16 --train_steps=20 --steps_per_loop=5
"""

from benchmarks.harness import cli
from benchmarks.speed import scaling_lib

cli.define_flags(scaling_lib.Config)

if __name__ == "__main__":
  cli.run_app(scaling_lib.run, scaling_lib.Config)
