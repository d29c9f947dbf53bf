"""App: training throughput of the engine, a bare step and model.fit.

See `throughput_lib` for what is measured and how. Examples:

  # ResNet50 as in `make bench` (CPU: 5 to 8 minutes on 2 cores).
  python -m benchmarks.speed.throughput --model=resnet50 --image_size=224 \
      --batch_size=16 --steps=3 --steps_per_loop=3 --repeats=3 \
      --targets=engine:N/bare>=0.98,engine:N/fit:1>=1.0

  # What steps_per_loop buys on a model where per-step overhead dominates.
  python -m benchmarks.speed.throughput --model=small_cnn --image_size=8 \
      --batch_size=8 --steps=500 --steps_per_loop=100 --repeats=5 \
      --variants=engine:N,engine:1,bare,fit:1,fit:N --extras=none

  # On a GPU: bf16 for every variant, XLA on.
  python -m benchmarks.speed.throughput --precision=bf16 --xla --batch_size=128
"""

import os
import sys

from absl import app
from absl import flags

from benchmarks.harness import cli
from benchmarks.speed import throughput_lib

cli.define_flags(throughput_lib.Config)

FLAGS = flags.FLAGS


def _report(sections):
  """Writes every round's sections; exits as soon as the final ones are out.

  Returning from `throughput_lib.run` frees the traced and compiled models,
  which took TensorFlow 5 to 60 s of CPU after a run of a few seconds here;
  a benchmark's time budget is better spent, so the app exits at once.
  """
  final = all(body["status"] == "ok" for body in sections.values())
  if FLAGS.output or final:
    cli.emit(sections)
  if final:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv):
  del argv  # Unused.
  throughput_lib.run(
    cli.config_from_flags(throughput_lib.Config), progress=_report
  )


if __name__ == "__main__":
  app.run(main)
