"""The device's own dense matmul rate, the ceiling utilisation is read against.

Measured in the same run as the throughput numbers, on the same device, so
model FLOPs utilisation (MFU = model FLOPs x images/s / this rate) compares
like with like. A chain x <- x @ b of square matrices (b scaled so values stay
near 1, even in fp16) runs inside one `tf.function`; it is timed after a
warm-up call and repeated; the best round is the peak (noise only slows a
run down), with the median and range beside it. On GPUs,
TensorFlow runs float32 matmuls as TF32 by default; the row says so.
"""

import dataclasses
import statistics
import time
from typing import Any

import tensorflow as tf

from benchmarks.harness import device as device_lib
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings


def size_flag() -> Any:
  """The field of the matrix side (--matmul_size), here and in throughput's."""
  return settings.flag(
    0,
    "Side of the square matrices; 0 picks 2048 on a CPU and 8192 on a GPU.",
    name="matmul_size",
  )


def chain_flag() -> Any:
  """The field of the chain length (--matmul_chain), here and throughput's."""
  return settings.flag(
    0,
    "Products per timed call; 0 picks 4 on a CPU and 50 on a GPU.",
    name="matmul_chain",
  )


@dataclasses.dataclass(frozen=True)
class Config:
  """What to measure; its `settings.flag` fields are `peak.py`'s flags.

  Attributes:
    precisions: --precision values to measure ("none" is float32).
    repeats: timed calls; the median is reported.
    device: "auto", "cpu" or "gpu".
    section: the section's name in the report.
  """

  precisions: tuple[str, ...] = ("none", "bf16", "fp16")
  size: int = size_flag()
  chain: int = chain_flag()
  repeats: int = 3
  device: str = "auto"
  section: str = "peak"


# The columns of a section of peak rows (`MatmulMeter.row`), here and in the
# throughput benchmark's limits section.
COLUMNS = ("name", "peak_flops_per_second", "flops_per_second", "size", "chain")


class MatmulMeter:
  """Times chains of square matmuls of one precision on one device.

  The throughput benchmark calls `rate()` once per round, between its
  variants, so the peak is measured under the same machine noise as the
  models it is compared with.
  """

  def __init__(
    self,
    *,
    device: device_lib.Device,
    precision: str,
    size: int = 0,
    chain: int = 0,
  ):
    """Builds the matrices and traces the chain (not timed).

    Args:
      device: where to run.
      precision: a key of `device_lib.MATMUL_DTYPES`.
      size: side of the matrices; 0 picks 2048 (CPU) or 8192 (GPU).
      chain: products per timed call; 0 picks 4 (CPU) or 50 (GPU).
    """
    on_gpu = device.kind == "gpu"
    self._device = device.name
    self._precision = precision
    self._size = size or (8192 if on_gpu else 2048)
    self._chain = chain or (50 if on_gpu else 4)
    dtype = device_lib.MATMUL_DTYPES[precision]
    with tf.device(self._device):
      self._x = tf.cast(tf.random.normal([self._size] * 2), dtype)
      self._b = tf.cast(
        tf.random.normal([self._size] * 2, stddev=self._size**-0.5), dtype
      )
    self._name = {"none": "float32", "bf16": "bfloat16", "fp16": "float16"}[
      precision
    ]
    if (
      on_gpu
      and precision == "none"
      and (tf.config.experimental.tensor_float_32_execution_enabled())
    ):
      self._name += " (TF32)"
    self._products = tf.function(self._chain_of_products)
    self.rate()  # Trace and warm up.

  def _chain_of_products(self, x, b):
    for _ in range(self._chain):
      x = tf.matmul(x, b)
    return tf.reduce_sum(tf.cast(x[0, :8], tf.float32))

  def rate(self) -> float:
    """Times one chain; returns FLOP/s (2 n^3 per product)."""
    with tf.device(self._device):
      start = time.perf_counter()
      self._products(self._x, self._b).numpy()
      seconds = time.perf_counter() - start
    return 2 * self._size**3 * self._chain / seconds

  def row(self, rates: list[float]) -> dict:
    """A report row from the rates of several `rate()` calls.

    Returns:
      {"name", "precision", "peak_flops_per_second" (the best call),
      "flops_per_second" (median) with _min/_max,
      "flops_per_second_per_round", "size", "chain"}.
    """
    return {
      "name": f"matmul {self._name}",
      "precision": self._precision,
      "peak_flops_per_second": max(rates),
      "flops_per_second": statistics.median(rates),
      "flops_per_second_min": min(rates),
      "flops_per_second_max": max(rates),
      "flops_per_second_per_round": list(rates),
      "size": self._size,
      "chain": self._chain,
    }


def measure(
  *,
  device: device_lib.Device,
  precision: str,
  size: int = 0,
  chain: int = 0,
  repeats: int = 3,
) -> dict:
  """Measures one precision `repeats` times in a row; returns its row."""
  meter = MatmulMeter(
    device=device, precision=precision, size=size, chain=chain
  )
  return meter.row([meter.rate() for _ in range(repeats)])


def run(config: Config) -> dict:
  """Measures every supported precision; returns {config.section: body}."""
  device = device_lib.resolve(config.device)
  rows, notes = [], []
  for precision in config.precisions:
    supported, reason = device.supports(precision)
    if not supported:
      notes.append(f"{precision}: {reason}")
      continue
    rows.append(
      measure(
        device=device,
        precision=precision,
        size=config.size,
        chain=config.chain,
        repeats=config.repeats,
      )
    )
  return {
    config.section: report_lib.section(
      title="Dense matmul peak",
      rows=rows,
      chart_key="peak_flops_per_second",
      columns=list(COLUMNS),
      notes=notes,
      config={"device": device.description, "repeats": config.repeats},
    )
  }
