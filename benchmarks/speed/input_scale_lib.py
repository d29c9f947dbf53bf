"""Input at scale: what each worker reads, and what a resume costs.

On a generated TFDS dataset of small JPEGs (`benchmarks/workloads/tfds_jpegs.py`, built
once into a cache in both formats), read the way the trainer reads cassava
(`trainer.data.load("cassava")` through `ctl.data.input.train_dataset`):

- records read per input pipeline in one epoch with N = 1, 2, 4 pipelines
  (counted, not timed; target: total / N);
- seconds from opening the dataset to the first batch when resuming at 10%,
  50% and 90% of an epoch (target: under 2 s and flat);
- decode throughput (JPEG decode + resize), per core;
- how records enter tf.data: one Python call per batch of indices (what
  `IndexedRecords.from_source` does), one per record in a parallel map, or a
  Python generator.

Each for the ArrayRecord copy read by index and the TFRecord copy streamed
(today's path for TFRecord-only datasets). The app is
`benchmarks/speed/input_scale.py`.
"""

import dataclasses
import gc
import os
import statistics
import tempfile
import threading
import time

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from benchmarks.harness import budget as budget_lib
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings
from benchmarks.harness import stats
from benchmarks.workloads import tfds_jpegs
from ctl.data import input as input_lib
from ctl.errors import UserError
from trainer import data as data_lib

INDEXED, STREAMED = "ArrayRecord, by index", "TFRecord, streamed"
_FORMATS = {INDEXED: "array_record", STREAMED: "tfrecord"}
RESUME_TARGET_S = 2.0


@dataclasses.dataclass(frozen=True)
class Config(settings.Rounds):
  """One run; its `settings.flag` fields are the flags of `input_scale.py`."""

  num_records: int = settings.flag(50_000, "Training JPEGs to generate.")
  jpeg_size: int = settings.flag(32, "Side of the generated JPEGs.")
  image_size: int = settings.flag(32, "Side the images are resized to.")
  global_batch: int = settings.flag(64, "Global batch size.")
  pipelines: tuple[int, ...] = settings.flag(
    (1, 2, 4), "Input pipeline counts N."
  )
  resume_points: tuple[float, ...] = (0.1, 0.5, 0.9)
  resume_passes: int = settings.flag(
    4,
    "Resume passes per round (a pass resumes once at every point, in an "
    "order that rotates pass to pass), each pass a sample of the resume "
    "targets: a ratio of 2 or 3 single resumes a side cannot be decided.",
  )
  decode_batches: int = settings.flag(40, "Batches timed for decode speed.")
  entry_records: int = settings.flag(
    4096, "Records read by each way into tf.data."
  )
  cache_dir: str = settings.flag(
    "",
    "Where the generated datasets are kept "
    "between runs (default: <tmp>/ctl_bench_cache).",
  )
  section: str = "input_scale"


def prepare(config: Config) -> tuple[dict[str, str], float]:
  """Builds (or finds in the cache) both copies; returns their dirs, seconds."""
  cache = config.cache_dir or os.path.join(
    tempfile.gettempdir(), "ctl_bench_cache"
  )
  start = time.perf_counter()
  dirs = {
    path: tfds_jpegs.build(
      os.path.join(
        cache, f"jpegs_{config.num_records}_{config.jpeg_size}", file_format
      ),
      file_format=file_format,
      num_train=config.num_records,
      num_eval=config.global_batch,
      image_size=config.jpeg_size,
    )
    for path, file_format in _FORMATS.items()
  }
  return dirs, time.perf_counter() - start


def _load(data_dir: str, config: Config) -> data_lib.Source:
  return data_lib.load(
    "cassava", image_size=config.image_size, data_dir=data_dir
  )


def _pipeline(
  source: data_lib.Source,
  config: Config,
  *,
  records=None,
  decode_fn=None,
  start_step: int = 0,
  pipelines: int = 1,
  pipeline_id: int = 0,
) -> tf.data.Dataset:
  """The trainer's training pipeline over `source` (or other records)."""
  return input_lib.train_dataset(
    records=records or source.train_records,
    num_records=source.num_train,
    decode_fn=decode_fn or source.decode_fn,
    input_context=tf.distribute.InputContext(
      num_input_pipelines=pipelines,
      input_pipeline_id=pipeline_id,
      num_replicas_in_sync=pipelines,
    ),
    global_batch_size=config.global_batch,
    seed=0,
    start_step=start_step,
    shuffle_buffer=source.shuffle_buffer,
  )


def records_read(data_dir: str, config: Config, *, pipelines: int) -> list[int]:
  """Records each of `pipelines` pipelines reads per epoch.

  Counted where records leave the source (before decoding). By index, each
  fetch call reads a fixed number of steps, so the largest call's size per
  step times the steps of an epoch is exact, whatever the read-ahead did (a
  difference of two snapshots was not: on a busy machine the read-ahead
  moved a whole epoch of a small dataset between them, 384 for 192).
  Streamed, it is the difference between two counts a whole number of
  blocks apart, taken after a first epoch, scaled to one epoch.
  """
  source = _load(data_dir, config)
  steps = input_lib.steps_per_epoch(source.num_train, config.global_batch)
  per_call = (
    input_lib.fetch_steps(
      global_batch_size=config.global_batch, pipelines=pipelines
    )
    if isinstance(source.train_records, input_lib.IndexedRecords)
    else 1
  )
  measured = -(-steps // per_call) * per_call
  counts = []
  for pipeline_id in range(pipelines):
    counter = _Counter()
    iterator = iter(
      _pipeline(
        source,
        config,
        records=counter.wrap(source.train_records),
        decode_fn=_no_decode,
        pipelines=pipelines,
        pipeline_id=pipeline_id,
      )
    )
    after = []
    for run in (steps, measured):
      for _ in range(run):
        next(iterator)
      after.append(counter.count)
    del iterator
    if counter.call_sizes:  # By index: each call fetches `per_call` steps.
      per_step = max(counter.call_sizes) / per_call
      counts.append(round(per_step * steps))
    else:
      counts.append(round((after[1] - after[0]) * steps / measured))
  return counts


def first_batch_seconds(
  data_dir: str, config: Config, *, fraction: float
) -> float:
  """Seconds from opening the dataset to the first batch, resuming mid-epoch."""
  start = time.perf_counter()
  source = _load(data_dir, config)
  steps = input_lib.steps_per_epoch(source.num_train, config.global_batch)
  next(iter(_pipeline(source, config, start_step=int(fraction * steps))))
  seconds = time.perf_counter() - start
  gc.collect()  # Stops the iterator's background threads before the next.
  return seconds


def decode_rate(data_dir: str, config: Config) -> float:
  """Images/s of the whole pipeline (read, decode, resize, batch)."""
  iterator = iter(_pipeline(_load(data_dir, config), config))
  for _ in range(5):
    next(iterator)
  start = time.perf_counter()
  for _ in range(config.decode_batches):
    next(iterator)
  return (
    config.decode_batches * config.global_batch / (time.perf_counter() - start)
  )


def entry_routes(
  data_dir: str, config: Config
) -> tuple[dict[str, tf.data.Dataset], int]:
  """Three routes into tf.data from the same TFDS data source, each reading
  the same `config.entry_records` random indices (fewer in a smaller
  dataset) as raw bytes: ({name: dataset}, records each reads)."""
  source = tfds.builder_from_directory(data_dir).as_data_source(
    "train", deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES
  )
  indices = np.random.RandomState(0).permutation(len(source))[
    : config.entry_records
  ]
  fetch = input_lib.IndexedRecords.from_source(source).fetch
  per_call = input_lib.PipelineOptions().records_per_fetch

  def per_record(index):
    record = tf.numpy_function(lambda i: source[int(i)], [index], tf.string)
    record.set_shape([])
    return record

  def generator():
    for index in indices:
      yield source[int(index)]

  keys = tf.data.Dataset.from_tensor_slices(indices.astype(np.int64))
  routes = {
    f"one call per {n} indices{' (used)' if n == per_call else ''}": keys.batch(
      n
    )
    .map(fetch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    .unbatch()
    for n in (config.global_batch, per_call)
  }
  routes.update(
    {
      "one call per record, parallel map": keys.map(
        per_record, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
      ),
      "Python generator": tf.data.Dataset.from_generator(
        generator, output_signature=tf.TensorSpec((), tf.string)
      ),
    }
  )
  return routes, len(indices)


def entry_round(routes: dict, records: int, config: Config) -> dict:
  """Records/s of each of `entry_routes`' routes, one after the other."""
  rates = {}
  for name, dataset in routes.items():
    start = time.perf_counter()
    count = sum(1 for _ in dataset.batch(config.global_batch))
    assert count == -(-records // config.global_batch)
    rates[name] = records / (time.perf_counter() - start)
  return rates


def run(config: Config) -> dict:
  """Prepares the data, measures everything; returns {section: body}.

  With `config.time_budget_secs`, the rounds (resume and entry) after the
  first are cut to those that fit it at the first round's pace (never below
  1), in every section that counts them.
  """
  if config.resume_passes < 1:
    raise UserError(
      f"--resume_passes must be >= 1, got {config.resume_passes}."
    )
  budget = budget_lib.Budget(config.time_budget_secs)
  dirs, prepare_seconds = prepare(config)
  cores = len(os.sched_getaffinity(0))
  total = (
    input_lib.steps_per_epoch(config.num_records, config.global_batch)
    * config.global_batch
  )
  rows, targets = _records_read_results(dirs, config, total)
  rates = {
    path: decode_rate(directory, config) for path, directory in dirs.items()
  }
  seconds, entry = _measure_rounds(dirs, config, budget)
  resume_rows, resume_targets = _resume_results(config, seconds)
  rows += resume_rows
  targets += resume_targets
  rows.append(
    {
      "name": "images/s per core (read + decode + resize)",
      **{path: rate / cores for path, rate in rates.items()},
      "target": "-",
    }
  )
  rounds = len(next(iter(entry.values())))
  sections = {
    config.section: report_lib.section(
      title="Input at scale: records read per worker, resume cost",
      rows=rows,
      columns=["name", INDEXED, STREAMED, "target"],
      chart_key="none",
      targets=targets,
      notes=_notes(config, prepare_seconds, total, cores, rounds),
      config=dataclasses.asdict(config),
    ),
    f"{config.section}_entry": _entry_section(config, entry),
  }
  return {name: budget.stamp(body) for name, body in sections.items()}


def _records_read_results(
  dirs: dict[str, str], config: Config, total: int
) -> tuple[list[dict], list[dict]]:
  """Counts the records each of N pipelines reads, for each N; returns a
  row per N and a target per N (each reads its share, total/N)."""
  rows, targets = [], []
  for n in config.pipelines:
    counts = {
      path: records_read(directory, config, pipelines=n)
      for path, directory in dirs.items()
    }
    rows.append(
      {
        "name": f"records read per pipeline, N={n} (max)",
        INDEXED: max(counts[INDEXED]),
        STREAMED: max(counts[STREAMED]),
        "target": total // n,
      }
    )
    # total/N over what each pipeline read: 1.0 is exactly its share.
    share = stats.ratio(
      name=f"(total/N) / records read, N={n}",
      numerator="total/N",
      denominator=rows[-1]["name"],
      numerator_values=[total / n] * n,
      denominator_values=counts[INDEXED],
    )
    targets.append(
      stats.verdict(
        share,
        threshold=0.98,
        name=f"each of {n} pipelines reads total/{n} records per epoch",
      )
    )
  return rows, targets


def _measure_rounds(
  dirs: dict[str, str], config: Config, budget: budget_lib.Budget
) -> tuple[dict, dict]:
  """The timed rounds, after a warm-up round of each: a round times
  `config.resume_passes` resume passes for both copies, then every route
  into tf.data (`entry_routes`); `config.repeats` rounds, or those that fit
  `budget`.

  Returns:
    ({path: {resume point: seconds to the first batch, per pass}},
     {route: records/s per round}).
  """
  seconds = {path: {f: [] for f in config.resume_points} for path in dirs}
  routes, records = entry_routes(dirs[INDEXED], config)
  for directory in dirs.values():  # Warm-up: imports, tracing, file caches.
    first_batch_seconds(directory, config, fraction=0.0)
  entry_round(routes, records, config)
  rates = {name: [] for name in routes}
  passes = 0
  for _ in budget.each_round(config.repeats):
    for _ in range(config.resume_passes):
      _resume_pass(dirs, config, seconds, passes)
      passes += 1
    for name, rate in entry_round(routes, records, config).items():
      rates[name].append(rate)
  return seconds, rates


def _resume_pass(
  dirs: dict[str, str], config: Config, seconds: dict, index: int
) -> None:
  """Resumes once at every point for both copies, appending to `seconds`.

  The points' order rotates with `index`: the first resume after a round's
  entry routes pays for their leftover threads, and always giving it to
  the same point biased the flatness ratio (resume at 10% / at 90% up to
  1.27 in a round).
  """
  points = config.resume_points
  shift = index % len(points)
  for fraction in points[shift:] + points[:shift]:
    for path, directory in dirs.items():
      seconds[path][fraction].append(
        first_batch_seconds(directory, config, fraction=fraction)
      )


def _resume_results(
  config: Config, seconds: dict
) -> tuple[list[dict], list[dict]]:
  """A row per resume point, and the targets: every resume under
  RESUME_TARGET_S, and the last point at most 1.5x the first."""
  rows = [
    {
      "name": f"seconds to first batch, resume at {fraction:.0%} of an epoch",
      **{path: statistics.median(seconds[path][fraction]) for path in seconds},
      "target": RESUME_TARGET_S,
    }
    for fraction in config.resume_points
  ]
  passes = len(seconds[INDEXED][config.resume_points[0]])
  slowest = [
    max(s[r] for s in seconds[INDEXED].values()) for r in range(passes)
  ]
  first, last = config.resume_points[0], config.resume_points[-1]
  targets = [
    stats.verdict(
      stats.ratio(
        name="2 s / slowest resume",
        numerator="2 s",
        denominator="slowest",
        numerator_values=[RESUME_TARGET_S] * passes,
        denominator_values=slowest,
      ),
      threshold=1.0,
      name="resume to first batch under 2 s at every position",
    ),
    stats.verdict(
      stats.ratio(
        name=f"resume at {first:.0%} / at {last:.0%}",
        numerator=f"{first:.0%}",
        denominator=f"{last:.0%}",
        numerator_values=seconds[INDEXED][first],
        denominator_values=seconds[INDEXED][last],
      ),
      threshold=0.67,
      name=f"resume flat: at {last:.0%} of an epoch at most 1.5x the time "
      f"at {first:.0%}",
    ),
  ]
  return rows, targets


def _notes(
  config: Config, prepare_seconds: float, total: int, cores: int, rounds: int
) -> list[str]:
  """What was read and how the main section's numbers were taken."""
  return [
    f"{config.num_records:,} JPEGs of {config.jpeg_size}x"
    f"{config.jpeg_size} in 3 classes, a TFDS dataset prepared twice "
    f"(ArrayRecord and TFRecord), cached; preparing or finding them took "
    f"{prepare_seconds:.0f} s. Global batch {config.global_batch}; "
    f"{total:,} records used per epoch.",
    "Records read are counted as they leave the source, for every pipeline "
    "of N, over a whole number of fetch calls after the first epoch (so "
    "read-ahead cancels out), scaled to one epoch; the streamed "
    "path reads the whole stream in every pipeline and skips to the resume "
    "position record by record.",
    f"Resume: a fresh pipeline per measurement (open the dataset, build, "
    f"first batch), {config.resume_passes} passes over the points in each "
    f"of {rounds} interleaved rounds (each pass a sample of the resume "
    f"targets, the points' order rotating), medians.",
    f"Decode: {cores} cores; tf.data AUTOTUNE; images resized to "
    f"{config.image_size}x{config.image_size}.",
  ]


def _entry_section(config: Config, entry: dict[str, list[float]]) -> dict:
  """The section of the entry routes' records/s per round, per route."""
  return report_lib.section(
    title="Input at scale: how records enter tf.data (ArrayRecord, "
    "raw bytes, no decode)",
    rows=[
      {
        "name": name,
        "records_per_second_per_round": rates,
        **stats.spread_fields("records_per_second", rates),
      }
      for name, rates in entry.items()
    ],
    columns=["name", "records_per_second"],
    chart_key="records_per_second",
    notes=[
      f"{config.entry_records:,} random indices read from the "
      "TFDS data source by each route, "
      f"{len(next(iter(entry.values())))} interleaved rounds after a "
      "warm-up round."
    ],
    config={"entry_records": config.entry_records},
  )


def _no_decode(*record):
  """Counting needs only the reads."""
  del record  # Unused.
  return tf.constant(0)


class _Counter:
  """Counts records as they leave a source."""

  def __init__(self):
    self.count = 0
    self.call_sizes = []  # Records per fetch call, by index only.
    self._lock = threading.Lock()

  def _add(self, n):
    with self._lock:
      self.count += int(n)
    return np.int64(0)

  def _add_call(self, n):
    with self._lock:
      self.call_sizes.append(int(n))
    return self._add(n)

  def wrap(self, records):
    if isinstance(records, input_lib.IndexedRecords):

      def fetch(indices):
        counted = tf.numpy_function(
          self._add_call, [tf.size(indices)], tf.int64
        )
        with tf.control_dependencies([counted]):
          return records.fetch(tf.identity(indices))

      return input_lib.IndexedRecords(size=records.size, fetch=fetch)

    def count_block(*block):
      size = tf.shape(tf.nest.flatten(block)[0])[0]
      counted = tf.numpy_function(self._add, [size], tf.int64)
      with tf.control_dependencies([counted]):
        return tf.nest.map_structure(tf.identity, block)

    return records.batch(256).map(count_block).unbatch()
