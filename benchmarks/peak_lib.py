"""The device's own dense matmul rate: the ceiling that utilisation is read against.

Measured in the same run as the throughput numbers, on the same device, so
model FLOPs utilisation (MFU = model FLOPs x images/s / this rate) compares
like with like. A chain x <- x @ b of square matrices (b scaled so values stay
near 1, even in fp16) runs inside one `tf.function`; it is timed after a
warm-up call and repeated, and the median rate is reported. On GPUs,
TensorFlow runs float32 matmuls as TF32 by default; the row says so.

  python -m benchmarks.peak                  # prints a Markdown table
"""

import dataclasses
import statistics
import time

from absl import app
from absl import flags
import tensorflow as tf

from benchmarks import cli
from benchmarks import device as device_lib
from benchmarks import report as report_lib

flags.DEFINE_integer("matmul_size", 0, "Side of the square matrices; 0 picks "
                     "2048 on a CPU and 8192 on a GPU.")
flags.DEFINE_integer("matmul_chain", 0, "Products per timed call; 0 picks 4 "
                     "on a CPU and 50 on a GPU.")

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class Config:
  """What to measure.

  Attributes:
    precisions: --precision values to measure ("none" is float32).
    size: side of the matrices; 0 picks one for the device.
    chain: products per timed call; 0 picks one for the device.
    repeats: timed calls; the median is reported.
    device: "auto", "cpu" or "gpu".
  """
  precisions: tuple[str, ...] = ("none", "bf16", "fp16")
  size: int = 0
  chain: int = 0
  repeats: int = 3
  device: str = "auto"


def measure(*, device: device_lib.Device, precision: str, size: int = 0,
            chain: int = 0, repeats: int = 3) -> dict:
  """Measures the dense matmul rate for one precision.

  Args:
    device: where to run.
    precision: a key of `device_lib.MATMUL_DTYPES`.
    size: side of the matrices; 0 picks 2048 (CPU) or 8192 (GPU).
    chain: products per timed call; 0 picks 4 (CPU) or 50 (GPU).
    repeats: timed calls.

  Returns:
    A report row: {"name", "precision", "flops_per_second" (median) with
    _min/_max, "flops_per_second_per_round", "size", "chain"}.
  """
  on_gpu = device.kind == "gpu"
  size = size or (8192 if on_gpu else 2048)
  chain = chain or (50 if on_gpu else 4)
  dtype = device_lib.MATMUL_DTYPES[precision]
  with tf.device(device.name):
    x = tf.cast(tf.random.normal([size, size]), dtype)
    b = tf.cast(tf.random.normal([size, size], stddev=size**-0.5), dtype)

  @tf.function
  def products(x, b):
    for _ in range(chain):
      x = tf.matmul(x, b)
    return tf.reduce_sum(tf.cast(x[0, :8], tf.float32))

  with tf.device(device.name):
    products(x, b).numpy()  # Trace and warm up.
    rates = []
    for _ in range(repeats):
      start = time.perf_counter()
      products(x, b).numpy()
      rates.append(2 * size**3 * chain / (time.perf_counter() - start))
  name = {"none": "float32", "bf16": "bfloat16", "fp16": "float16"}[precision]
  if on_gpu and precision == "none" and (
      tf.config.experimental.tensor_float_32_execution_enabled()):
    name += " (TF32)"
  return {"name": f"matmul {name}", "precision": precision,
          "flops_per_second": statistics.median(rates),
          "flops_per_second_min": min(rates),
          "flops_per_second_max": max(rates),
          "flops_per_second_per_round": rates, "size": size, "chain": chain}


def run(config: Config) -> dict:
  """Measures every supported precision; returns {"peak": section}."""
  device = device_lib.resolve(config.device)
  rows, notes = [], []
  for precision in config.precisions:
    supported, reason = device.supports(precision)
    if not supported:
      notes.append(f"{precision}: {reason}")
      continue
    rows.append(measure(device=device, precision=precision, size=config.size,
                        chain=config.chain, repeats=config.repeats))
  return {"peak": report_lib.section(
      title="Dense matmul peak", rows=rows, chart_key="flops_per_second",
      columns=["name", "flops_per_second", "size", "chain"], notes=notes,
      config={"device": device.description, "repeats": config.repeats})}


def main(argv):
  del argv  # Unused.
  sections = run(Config(size=FLAGS.matmul_size, chain=FLAGS.matmul_chain,
                        repeats=FLAGS.repeats, device=FLAGS.device))
  cli.emit({cli.section_name("peak"): sections["peak"]})


if __name__ == "__main__":
  app.run(main)
