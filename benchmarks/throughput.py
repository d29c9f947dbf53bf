"""App: training throughput of the engine, a bare step and model.fit.

See `throughput_lib` for what is measured and how. Examples:

  # ResNet50 as in `make bench` (CPU: 5 to 8 minutes on 2 cores).
  python -m benchmarks.throughput --model=resnet50 --image_size=224 \
      --batch_size=16 --steps=3 --steps_per_loop=3 --repeats=3 \
      --targets=engine:N/bare>=0.98,engine:N/fit:1>=1.0

  # What steps_per_loop buys on a model where per-step overhead dominates.
  python -m benchmarks.throughput --model=small_cnn --image_size=8 \
      --batch_size=8 --steps=500 --steps_per_loop=100 --repeats=5 \
      --variants=engine:N,engine:1,bare,fit:1,fit:N --extras=none

  # On a GPU: bf16 for every variant, XLA on.
  python -m benchmarks.throughput --precision=bf16 --xla --batch_size=128
"""

import os
import sys

from absl import app
from absl import flags

from benchmarks import cli
from benchmarks import device as device_lib
from benchmarks import throughput_lib

flags.DEFINE_enum(
  "model",
  "resnet50",
  ["resnet50", "small_cnn"],
  "The trainer's model to train.",
)
flags.DEFINE_integer("image_size", 224, "Side of the square input images.")
flags.DEFINE_integer("batch_size", 16, "Global batch size (one device).")
flags.DEFINE_integer(
  "steps",
  3,
  "Timed steps per variant per round; a "
  "multiple of every variant's steps per call.",
)
flags.DEFINE_integer(
  "steps_per_loop",
  3,
  "N in the variant specs: steps per engine call / per fit execution.",
)
flags.DEFINE_enum(
  "precision",
  "none",
  list(device_lib.PRECISIONS),
  "Precision of the variants that name none.",
)
flags.DEFINE_bool("xla", False, "Compile every variant's step with XLA.")
flags.DEFINE_list(
  "variants",
  list(throughput_lib.DEFAULT_VARIANTS),
  "Variant specs (see benchmarks/variants.py); the first is the main one.",
)
flags.DEFINE_list(
  "extras",
  ["auto"],
  "More variants: 'auto' adds the "
  "mixed-precision and XLA ones the device supports; 'none'.",
)
flags.DEFINE_list(
  "ratios",
  list(throughput_lib.DEFAULT_RATIOS),
  "Ratios to "
  "report (numerator/denominator); those with a variant that "
  "did not run are left out.",
)
flags.DEFINE_list(
  "targets",
  [],
  "Targets numerator/denominator>=threshold, stated as PASS or MISS.",
)
flags.DEFINE_enum(
  "optimizer",
  "adam",
  ["adam", "sgd"],
  "As the trainer's --optimizer (default adam).",
)
flags.DEFINE_bool(
  "measure_peak",
  True,
  "Measure the matmul peak and report MFU (adds a 'limits' section).",
)
flags.DEFINE_integer(
  "matmul_size", 0, "Matmul peak: matrix side; 0 picks one for the device."
)
flags.DEFINE_integer(
  "matmul_chain",
  0,
  "Matmul peak: products per call; 0 picks one for the device.",
)
flags.DEFINE_string("title", "", "Section title; empty describes the run.")

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
    cli.config_from_flags(
      throughput_lib.Config,
      renames=dict(peak_size="matmul_size", peak_chain="matmul_chain"),
    ),
    progress=_report,
  )


if __name__ == "__main__":
  app.run(main)
