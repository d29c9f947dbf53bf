"""App: training throughput of the engine, a bare step and model.fit.

See `throughput_lib` for what is measured and how. Examples:

  # ResNet50 as in `make bench` (CPU: about 6 minutes on 2 cores).
  python -m benchmarks.speed.throughput --model=resnet50 --image_size=224 \
      --batch_size=16 --steps=1 --steps_per_loop=1 --repeats=10 \
      --variants=engine:1,bare,fit:1 --extras=none \
      --targets=engine:1/bare>=0.95,engine:1/fit:1>=0.95

  # What steps_per_loop buys on a model where per-step overhead dominates.
  python -m benchmarks.speed.throughput --model=small_cnn --image_size=8 \
      --batch_size=8 --steps=500 --steps_per_loop=100 --repeats=5 \
      --variants=engine:N,engine:1,bare,fit:1,fit:N --extras=none

  # On a GPU: bf16 for every variant, XLA on.
  python -m benchmarks.speed.throughput --precision=bf16 --xla --batch_size=128
"""

from benchmarks.harness import cli
from benchmarks.speed import throughput_lib

cli.define_flags(throughput_lib.Config)

if __name__ == "__main__":
  cli.run_app(
    throughput_lib.run, throughput_lib.Config, progress=cli.exit_when_final
  )
