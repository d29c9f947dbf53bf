"""Input pipeline: how many images/s the cassava preprocessing alone delivers.

Writes JPEGs like cassava's (about 500x400, photo-like: smooth colour with
noise) into a temporary directory, then reads them the way the trainer does:
`trainer.data.load("files", ...)` (JPEG decode, resize, scale) through
`ctl.data.input.train_dataset` (deterministic shuffle, shard, batch, prefetch),
without a model. The rate is compared with what the model consumes, if given
(`run_all` passes the ResNet50 engine rate from the throughput section).
The app is `benchmarks/speed/input_pipeline.py`.
"""

import dataclasses
import os
import tempfile
import time

import numpy as np
import tensorflow as tf

from benchmarks.harness import budget as budget_lib
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings
from benchmarks.harness import stats
from trainer import data as data_lib


@dataclasses.dataclass(frozen=True)
class Config(settings.Rounds):
  """One input-pipeline run.

  Its `settings.flag` fields are the flags of `input_pipeline.py`.
  """

  num_jpegs: int = settings.flag(256, "JPEG files to generate.")
  jpeg_width: int = settings.flag(500, "Width of the generated JPEGs.")
  jpeg_height: int = settings.flag(400, "Height of the generated JPEGs.")
  image_size: int = settings.flag(
    300, "Side the images are resized to (the cassava trainer's input size)."
  )
  batch_size: int = settings.flag(16, "Global batch size.")
  batches: int = settings.flag(40, "Batches timed per round.")
  warmup_batches: int = 4
  model_images_per_second: float = settings.flag(
    0.0, "What the model consumes, to compare with; 0 skips the comparison."
  )
  model_label: str = settings.flag("the model", "Names that rate.")
  model_image_size: int = settings.flag(
    0,
    "Image side the model rate was "
    "measured at; when it differs from --image_size, a "
    "pixel-scaled estimate is noted.",
  )
  section: str = "input_pipeline"


def write_jpegs(
  directory: str, *, count: int, width: int, height: int, seed: int = 0
) -> int:
  """Writes `count` photo-like JPEGs into two class directories.

  Returns:
    Their total size in bytes.
  """
  rng = np.random.RandomState(seed)
  total = 0
  for index in range(count):
    coarse = rng.uniform(0, 255, size=(6, 8, 3)).astype(np.float32)
    image = tf.image.resize(coarse, (height, width), method="bicubic")
    image += rng.normal(0, 12, size=(height, width, 3)).astype(np.float32)
    encoded = tf.io.encode_jpeg(
      tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8), quality=90
    ).numpy()
    class_dir = os.path.join(directory, f"class_{index % 2}")
    os.makedirs(class_dir, exist_ok=True)
    with open(os.path.join(class_dir, f"{index:05d}.jpg"), "wb") as f:
      f.write(encoded)
    total += len(encoded)
  return total


# Fewest batches a round times when the budget cuts them.
_BATCHES_FLOOR = 10


def measure(
  directory: str, config: Config, budget: budget_lib.Budget
) -> tuple[list[float], int]:
  """Images/s of the trainer's pipeline over `directory`, one per round.

  The rounds, then the batches of a round (never below _BATCHES_FLOOR), are
  cut to fit `budget` at the pace of the warm-up batches after the first.

  Returns:
    (images/s per round, batches timed per round).
  """
  source = data_lib.load(
    "files", image_size=config.image_size, data_dir=directory
  )
  dataset = source.train_dataset(global_batch_size=config.batch_size)
  iterator = iter(dataset)
  next(iterator)
  start = time.perf_counter()
  for _ in range(config.warmup_batches - 1):
    next(iterator)
  batch_secs = (time.perf_counter() - start) / max(config.warmup_batches - 1, 1)
  rounds, batches = budget_lib.plan_rounds_and_steps(
    batch_secs,
    config.repeats,
    config.batches,
    budget.secs,
    budget.spent(),
    steps_floor=_BATCHES_FLOOR,
  )
  first = f"a warm-up batch took {batch_secs:.2g} s"
  budget.record("rounds", rounds, config.repeats, first)
  budget.record("batches per round", batches, config.batches, first)
  rates = []
  for _ in range(rounds):
    start = time.perf_counter()
    for _ in range(batches):
      next(iterator)
    rates.append(batches * config.batch_size / (time.perf_counter() - start))
  return rates, batches


def run(config: Config) -> dict:
  """Generates the JPEGs, measures the pipeline; returns {section: body}."""
  budget = budget_lib.Budget(config.time_budget_secs)
  with tempfile.TemporaryDirectory(prefix="ctl_bench_jpegs_") as directory:
    total_bytes = write_jpegs(
      directory,
      count=config.num_jpegs,
      width=config.jpeg_width,
      height=config.jpeg_height,
    )
    rates, batches = measure(directory, config, budget)
  size = config.image_size
  pipeline = f"decode + resize to {size}x{size}"
  rows = [
    dict(
      name=pipeline,
      images_per_second_per_round=rates,
      **stats.spread_fields("images_per_second", rates),
    )
  ]
  ratios, notes = (
    [],
    [
      f"{config.num_jpegs} JPEGs of {config.jpeg_width}x{config.jpeg_height}"
      f" (mean {total_bytes / config.num_jpegs / 1024:.0f} KiB), read by "
      "trainer.data.load('files') through ctl.data.input.train_dataset, batch "
      f"{config.batch_size}; {batches} batches timed per round after "
      f"{config.warmup_batches} warm-up batches.",
      f"Parallelism: tf.data AUTOTUNE on {os.cpu_count()} logical cores. In "
      "training the pipeline shares the host CPU with the step (all of it, "
      "on a CPU-only machine), so this rate is an upper bound on what it "
      "delivers there.",
    ],
  )
  if config.model_images_per_second > 0:
    row, ratio, model_notes = _against_model(config, pipeline, rates)
    rows.append(row)
    ratios.append(ratio)
    notes += model_notes
  return {
    config.section: budget.stamp(
      report_lib.section(
        title="Input pipeline: cassava-style JPEG decoding",
        rows=rows,
        ratios=ratios,
        notes=notes,
        columns=["name", "images_per_second"],
        config={
          "num_jpegs": config.num_jpegs,
          "image_size": size,
          "batch_size": config.batch_size,
          "batches": config.batches,
          "repeats": config.repeats,
        },
      )
    )
  }


def _against_model(
  config: Config, pipeline: str, rates: list[float]
) -> tuple[dict, dict, list[str]]:
  """The model's consumption as a row, the pipeline's rate against it, and
  notes on whether the pipeline keeps up (at the model's image size too)."""
  size = config.image_size
  model_rates = [config.model_images_per_second] * len(rates)
  row = dict(
    name=f"consumed by {config.model_label}",
    images_per_second=config.model_images_per_second,
  )
  ratio = stats.ratio(
    name=f"{pipeline} / {config.model_label}",
    numerator=pipeline,
    denominator=row["name"],
    numerator_values=rates,
    denominator_values=model_rates,
  )
  verdict = "keeps up with" if ratio["median"] >= 1 else "cannot keep up with"
  notes = [
    f"The pipeline {verdict} {config.model_label} ({ratio['median']:.3g}x)."
  ]
  if config.model_image_size and config.model_image_size != size:
    scaled = (
      config.model_images_per_second * (config.model_image_size / size) ** 2
    )
    notes.append(
      f"The model rate was measured at {config.model_image_size}x"
      f"{config.model_image_size}; at {size}x{size} it needs about "
      f"{(size / config.model_image_size) ** 2:.2f}x the FLOPs per image, "
      f"so it would consume about {scaled:.3g} images/s (a pixel-count "
      "estimate, not a measurement)."
    )
  return row, ratio, notes
