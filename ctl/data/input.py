"""Deterministic, resumable input pipelines whose cost is each worker's share.

TensorFlow cannot checkpoint a distributed iterator, so the data position is
derived from the checkpointed global step instead. Epoch `e` is a sequence of
record positions cut to a whole number of global batches; step `s` uses the
positions `[p, p + global_batch)` with `p = (s mod steps_per_epoch) *
global_batch`, and input pipeline `i` of `N` takes the positions `p + i`,
`p + i + N`, ... of them. So one worker with a global batch of B and two
workers with B/2 each see exactly the same examples at every step, and a
checkpoint written by N workers resumes on M workers in the same order.

Records come in two kinds:

- `IndexedRecords` (random access: in-memory arrays, ArrayRecord files, a list
  of files): position `q` of epoch `e` is record
  `index_shuffle(q, seed=(seed, e))`, a stateless global permutation. A
  pipeline computes the record indices of its own examples for a step
  directly and fetches only those: no skip-scan, and resuming costs the same
  at any position.
- A `tf.data.Dataset` (streamed, e.g. TFRecord files): every pipeline reads
  the whole stream, shuffled in blocks of `shuffle_buffer` records with a
  stateless seed, keeps every N-th record, and on resume skips the records
  before the position. This costs N reads of the data per epoch and a scan on
  resume; it is kept for sources that cannot be read by index.

In both, decoding happens after the selection, in parallel tf.data maps.
"""

from collections.abc import Callable, Sequence
import dataclasses
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

_EPOCH_SEED_STRIDE = 1_000_003  # More blocks than any epoch will have.


class RandomAccessSource(Protocol):
  """What TFDS data sources, Grain sources and `array_record` readers offer."""

  def __len__(self) -> int: ...

  def __getitems__(self, keys: Sequence[int]) -> Sequence[bytes]: ...


@dataclasses.dataclass(frozen=True)
class IndexedRecords:
  """Records that can be read by index.

  Attributes:
    size: the number of records.
    fetch: int64 indices of shape [n] -> the records at those indices (a
      structure of tensors with leading dimension n); traced inside tf.data.
  """

  size: int
  fetch: Callable[[tf.Tensor], Any]

  @classmethod
  def from_tensors(cls, tensors) -> "IndexedRecords":
    """Records held in memory: a structure of arrays with a common length."""
    tensors = tf.nest.map_structure(tf.convert_to_tensor, tensors)
    size = int(tf.nest.flatten(tensors)[0].shape[0])

    @tf.autograph.experimental.do_not_convert  # tf.data would convert it.
    def fetch(indices):
      return tf.nest.map_structure(lambda t: tf.gather(t, indices), tensors)

    return cls(size=size, fetch=fetch)

  @classmethod
  def from_source(cls, source: RandomAccessSource) -> "IndexedRecords":
    """Byte records read with `source.__getitems__`, one call per batch.

    One Python call (`tf.numpy_function`) per batch of indices, at least
    `PipelineOptions.records_per_fetch` of them, rather than one per record
    or a Python generator: `benchmarks/speed/input_scale.py` measured it about 20
    times faster on ArrayRecord (the call's fixed cost is spread, and the
    source reads the batch in parallel: ArrayRecord's reader, gcsfs's
    concurrent `cat`).
    """

    def read(indices):
      return np.array(source.__getitems__(indices.tolist()), dtype=object)

    @tf.autograph.experimental.do_not_convert  # tf.data would convert it.
    def fetch(indices):
      records = tf.numpy_function(read, [indices], tf.string)
      records.set_shape([None])
      return records

    return cls(size=len(source), fetch=fetch)


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
  """tf.data settings of every input pipeline.

  Attributes:
    records_per_fetch: at least this many records per `fetch` call (whole
      steps' shares): a call has a fixed cost (a Python call, a thread pool
      in ArrayRecord's reader, a round trip to Cloud Storage) that larger
      calls spread; `benchmarks/speed/input_scale.py` measures it.
    parallel_fetches: concurrent `fetch` calls; AUTOTUNE lets tf.data choose.
    parallel_decodes: concurrent decodes; AUTOTUNE lets tf.data choose.
    private_threads: size of a thread pool private to the pipeline; 0 uses
      TensorFlow's shared pool. On a GPU host, a private pool keeps input work
      from queueing behind the host-side ops of the step.
    prefetch_batches: batches prepared ahead; AUTOTUNE lets tf.data choose.
      (`distribute_datasets_from_function` then copies each batch to its
      device ahead of the step.)
  """

  records_per_fetch: int = 256
  parallel_fetches: int = tf.data.AUTOTUNE
  parallel_decodes: int = tf.data.AUTOTUNE
  private_threads: int = 0
  prefetch_batches: int = tf.data.AUTOTUNE

  def apply(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    options = tf.data.Options()
    options.deterministic = True  # The order is part of exact resume.
    options.autotune.enabled = True
    if self.private_threads:
      options.threading.private_threadpool_size = self.private_threads
    return dataset.prefetch(self.prefetch_batches).with_options(options)


@tf.autograph.experimental.do_not_convert
def steps_per_epoch(num_records: int, global_batch_size: int) -> int:
  """Whole global batches per epoch (the incomplete last batch is dropped)."""
  return num_records // global_batch_size


def train_dataset(
  *,
  records: IndexedRecords | tf.data.Dataset,
  decode_fn: Callable,
  input_context: tf.distribute.InputContext,
  global_batch_size: int,
  seed: int,
  start_step: int,
  num_records: int | None = None,
  shuffle_buffer: int | None = None,
  options: PipelineOptions = PipelineOptions(),
) -> tf.data.Dataset:
  """An endless, per-replica-batched training dataset that starts at a step.

  Args:
    records: `IndexedRecords`, or a finite dataset of cheap records in a
      fixed order (streamed).
    decode_fn: record -> (image, label); runs after the selection.
    input_context: from `distribute_datasets_from_function`.
    global_batch_size: examples per step over all replicas.
    seed: the run's seed; epoch `e` is shuffled with a seed derived from it.
    start_step: the global step the first batch belongs to.
    num_records: the stream's length (streamed records only).
    shuffle_buffer: streamed records only: records shuffled together;
      defaults to `num_records` (a full permutation per epoch). Large streamed
      sources use blocks of this size (each block permuted, blocks kept in
      order) to bound memory.
    options: tf.data settings.

  Returns:
    A dataset of (images, labels) batches of the per-replica batch size.
  """
  indexed = isinstance(records, IndexedRecords)
  num_records = records.size if indexed else num_records
  spe = steps_per_epoch(num_records, global_batch_size)
  if spe < 1:
    raise ValueError(
      f"{num_records} records cannot fill one global batch of "
      f"{global_batch_size}."
    )
  per_replica = input_context.get_per_replica_batch_size(global_batch_size)
  selection = dict(
    pipelines=input_context.num_input_pipelines,
    pipeline_id=input_context.input_pipeline_id,
    global_batch_size=global_batch_size,
    seed=seed,
    start_step=start_step,
  )
  if indexed:
    dataset = _indexed_train_records(records, options=options, **selection)
  else:
    dataset = _streamed_train_records(
      records, spe=spe, block=shuffle_buffer or num_records, **selection
    )
  dataset = dataset.map(
    decode_fn, num_parallel_calls=options.parallel_decodes, deterministic=True
  )
  dataset = dataset.batch(per_replica, drop_remainder=True)
  return options.apply(dataset)


def eval_dataset(
  *,
  records: IndexedRecords | tf.data.Dataset,
  decode_fn: Callable,
  input_context: tf.distribute.InputContext,
  global_batch_size: int,
  options: PipelineOptions = PipelineOptions(),
) -> tf.data.Dataset:
  """A finite evaluation dataset, sharded by record, keeping every example.

  Args:
    records: `IndexedRecords`, or a finite dataset of cheap records.
    decode_fn: record -> (image, label).
    input_context: from `distribute_datasets_from_function`.
    global_batch_size: examples per step over all replicas.
    options: tf.data settings.

  Returns:
    A dataset of (images, labels) batches; the last one may be partial.
  """
  per_replica = input_context.get_per_replica_batch_size(global_batch_size)
  pipelines = input_context.num_input_pipelines
  pipeline_id = input_context.input_pipeline_id
  if isinstance(records, IndexedRecords):
    dataset = tf.data.Dataset.range(pipeline_id, records.size, pipelines)
    dataset = (
      dataset.batch(options.records_per_fetch)
      .map(
        records.fetch,
        num_parallel_calls=options.parallel_fetches,
        deterministic=True,
      )
      .unbatch()
    )
  else:
    dataset = records.shard(pipelines, pipeline_id)
  dataset = dataset.map(
    decode_fn, num_parallel_calls=options.parallel_decodes, deterministic=True
  )
  return options.apply(dataset.batch(per_replica))


def dataset_fns(
  *,
  train_records: IndexedRecords,
  eval_records: IndexedRecords | None,
  decode_fn: Callable,
  global_batch_size: int,
) -> tuple[
  Callable[..., tf.data.Dataset], Callable[..., tf.data.Dataset] | None
]:
  """A task's `train_dataset_fn` and `eval_dataset_fn` over indexed records.

  The train function gives `train_dataset` (endless, seeded, its first batch
  that of `start_step`), the eval function `eval_dataset` (each example
  once), both decoded by `decode_fn` (a record -> one batch element, any
  structure: `(x, y)`, `(x, y, weight)`, dicts); None for no eval records.
  """

  def train_dataset_fn(input_context, start_step, seed):
    return train_dataset(
      records=train_records,
      decode_fn=decode_fn,
      input_context=input_context,
      global_batch_size=global_batch_size,
      seed=seed,
      start_step=start_step,
    )

  def eval_dataset_fn(input_context):
    return eval_dataset(
      records=eval_records,
      decode_fn=decode_fn,
      input_context=input_context,
      global_batch_size=global_batch_size,
    )

  return train_dataset_fn, (None if eval_records is None else eval_dataset_fn)


@tf.autograph.experimental.do_not_convert
def train_indices(
  *,
  step,
  num_records: int,
  global_batch_size: int,
  seed: int,
  pipelines: int = 1,
  pipeline_id: int = 0,
):
  """The record indices pipeline `pipeline_id` reads at global step `step`.

  Pure arithmetic on the step: this is the whole data position.

  Returns:
    An int64 tensor of `global_batch_size / pipelines` record indices.
  """
  spe = steps_per_epoch(num_records, global_batch_size)
  step = tf.cast(step, tf.int64)
  epoch, step_in_epoch = step // spe, step % spe
  positions = (
    step_in_epoch * global_batch_size
    + pipeline_id
    + pipelines * tf.range(global_batch_size // pipelines, dtype=tf.int64)
  )
  return tf.random.experimental.index_shuffle(
    positions,
    seed=tf.stack([tf.constant(seed, tf.int64), epoch]),
    max_index=num_records - 1,
  )


def fetch_steps(
  *,
  global_batch_size: int,
  pipelines: int,
  options: PipelineOptions = PipelineOptions(),
) -> int:
  """How many steps' shares one `fetch` call of a training pipeline reads."""
  share = global_batch_size // pipelines
  return max(1, -(-options.records_per_fetch // share))


def _indexed_train_records(
  records: IndexedRecords,
  *,
  pipelines: int,
  pipeline_id: int,
  global_batch_size: int,
  seed: int,
  start_step: int,
  options: PipelineOptions,
) -> tf.data.Dataset:
  """Each step's share of records, fetched by index, a few steps per call."""
  steps_per_fetch = fetch_steps(
    global_batch_size=global_batch_size, pipelines=pipelines, options=options
  )

  @tf.autograph.experimental.do_not_convert
  def indices(first_step):
    steps = first_step + tf.range(steps_per_fetch, dtype=tf.int64)
    return tf.reshape(
      tf.map_fn(
        lambda step: train_indices(
          step=step,
          num_records=records.size,
          global_batch_size=global_batch_size,
          seed=seed,
          pipelines=pipelines,
          pipeline_id=pipeline_id,
        ),
        steps,
      ),
      [-1],
    )

  return (
    tf.data.Dataset.range(start_step, 2**62, steps_per_fetch)
    .map(indices)
    .map(
      records.fetch,
      num_parallel_calls=options.parallel_fetches,
      deterministic=True,
    )
    .unbatch()
  )


def _streamed_train_records(
  records: tf.data.Dataset,
  *,
  pipelines: int,
  pipeline_id: int,
  spe: int,
  global_batch_size: int,
  seed: int,
  start_step: int,
  block: int,
) -> tf.data.Dataset:
  """Every N-th record of the block-shuffled stream, skipped to the step."""
  start_epoch, step_in_epoch = divmod(start_step, spe)
  skip_records = step_in_epoch * global_batch_size // pipelines

  def epoch_records(epoch):
    shuffled = _shuffle_in_blocks(
      records, block_size=block, seed=seed, epoch=epoch
    )
    shard = shuffled.take(spe * global_batch_size).shard(pipelines, pipeline_id)
    return shard.skip(
      tf.where(epoch == start_epoch, tf.constant(skip_records, tf.int64), 0)
    )

  return tf.data.Dataset.range(start_epoch, 2**62).flat_map(epoch_records)


def _shuffle_in_blocks(
  records: tf.data.Dataset, *, block_size: int, seed: int, epoch
) -> tf.data.Dataset:
  """Permutes each block of `block_size` records with a stateless seed.

  The permutation is a pure function of (seed, epoch, block index): no RNG
  state, so the same epoch is the same order in every process and restart.
  (`Dataset.shuffle` cannot be used here: it rejects a tensor seed when the
  global seed is 0.)
  """

  def permute(index, block):
    size = tf.shape(tf.nest.flatten(block)[0])[0]
    order = tf.random.experimental.stateless_shuffle(
      tf.range(size),
      seed=tf.stack(
        [tf.cast(seed, tf.int64), epoch * _EPOCH_SEED_STRIDE + index]
      ),
    )
    return tf.nest.map_structure(lambda t: tf.gather(t, order), block)

  return records.batch(block_size).enumerate().map(permute).unbatch()
