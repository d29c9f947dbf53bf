"""Deterministic, resumable input pipelines.

TensorFlow cannot checkpoint a distributed iterator, so the data position is
derived from the checkpointed global step instead: epoch `e` is the record
stream shuffled with a seed made from (`seed`, `e`), cut to a whole number of
global batches, and step `s` reads the global batch
`[s * global_batch, (s + 1) * global_batch)` of that stream. Each input
pipeline takes every `num_input_pipelines`-th record of it, so one worker with
a global batch of B and two workers with B/2 each see exactly the same examples
at every step. On restore, the skip happens on the cheap records (indices, file
names, encoded bytes) before the expensive decode.
"""

from typing import Callable

import tensorflow as tf

_EPOCH_SEED_STRIDE = 1_000_003  # More blocks than any epoch will have.


def steps_per_epoch(num_records: int, global_batch_size: int) -> int:
  """Whole global batches per epoch (the incomplete last batch is dropped)."""
  return num_records // global_batch_size


def train_dataset(*, records: tf.data.Dataset, num_records: int,
                  decode_fn: Callable, input_context: tf.distribute.InputContext,
                  global_batch_size: int, seed: int, start_step: int,
                  shuffle_buffer: int | None = None) -> tf.data.Dataset:
  """An endless, per-replica-batched training dataset that starts at a step.

  Args:
    records: a finite dataset of cheap records in a fixed order.
    num_records: its length.
    decode_fn: record -> (image, label); runs after sharding and skipping.
    input_context: from `distribute_datasets_from_function`.
    global_batch_size: examples per step over all replicas.
    seed: the run's seed; epoch `e` is shuffled with a seed derived from it.
    start_step: the global step the first batch belongs to.
    shuffle_buffer: records shuffled together; defaults to `num_records` (a
      full permutation per epoch). Large streamed sources use blocks of this
      size (each block permuted, blocks kept in order) to bound memory.

  Returns:
    A dataset of (images, labels) batches of the per-replica batch size.
  """
  spe = steps_per_epoch(num_records, global_batch_size)
  if spe < 1:
    raise ValueError(f"{num_records} records cannot fill one global batch of "
                     f"{global_batch_size}.")
  pipelines = input_context.num_input_pipelines
  pipeline_id = input_context.input_pipeline_id
  per_replica = input_context.get_per_replica_batch_size(global_batch_size)
  start_epoch, step_in_epoch = divmod(start_step, spe)
  skip_records = step_in_epoch * global_batch_size // pipelines
  block = shuffle_buffer or num_records

  def epoch_records(epoch):
    shuffled = _shuffle_in_blocks(records, block_size=block, seed=seed,
                                  epoch=epoch)
    shard = shuffled.take(spe * global_batch_size).shard(pipelines, pipeline_id)
    return shard.skip(
        tf.where(epoch == start_epoch, tf.constant(skip_records, tf.int64), 0))

  dataset = tf.data.Dataset.range(start_epoch, 2**62).flat_map(epoch_records)
  dataset = dataset.map(decode_fn, num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True)
  dataset = dataset.batch(per_replica, drop_remainder=True)
  return dataset.prefetch(tf.data.AUTOTUNE)


def eval_dataset(*, records: tf.data.Dataset, decode_fn: Callable,
                 input_context: tf.distribute.InputContext,
                 global_batch_size: int) -> tf.data.Dataset:
  """A finite evaluation dataset, sharded by record, keeping every example.

  Args:
    records: a finite dataset of cheap records.
    decode_fn: record -> (image, label).
    input_context: from `distribute_datasets_from_function`.
    global_batch_size: examples per step over all replicas.

  Returns:
    A dataset of (images, labels) batches; the last one may be partial.
  """
  per_replica = input_context.get_per_replica_batch_size(global_batch_size)
  dataset = records.shard(input_context.num_input_pipelines,
                          input_context.input_pipeline_id)
  dataset = dataset.map(decode_fn, num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True)
  return dataset.batch(per_replica).prefetch(tf.data.AUTOTUNE)


def _shuffle_in_blocks(records: tf.data.Dataset, *, block_size: int, seed: int,
                       epoch) -> tf.data.Dataset:
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
        seed=tf.stack([tf.cast(seed, tf.int64),
                       epoch * _EPOCH_SEED_STRIDE + index]))
    return tf.nest.map_structure(lambda t: tf.gather(t, order), block)

  return records.batch(block_size).enumerate().map(permute).unbatch()
