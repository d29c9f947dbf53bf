"""ctl.input: the data position is a pure function of (seed, step)."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from ctl import input as input_lib

NUM_RECORDS = 22  # Not a multiple of the batch: each epoch drops 2 records.
GLOBAL_BATCH = 4
STEPS_PER_EPOCH = NUM_RECORDS // GLOBAL_BATCH


def _records():
  # (index, label) records, like the digits source: decode_fn sees a tuple.
  indices = np.arange(NUM_RECORDS, dtype=np.int64)
  return tf.data.Dataset.from_tensor_slices((indices, indices % 3))


def _decode(index, label):
  # Stands in for an image decode; keeps the record's identity visible.
  return index * 10, label


def _context(pipelines=1, pipeline_id=0):
  return tf.distribute.InputContext(num_input_pipelines=pipelines,
                                    input_pipeline_id=pipeline_id,
                                    num_replicas_in_sync=pipelines)


def _train_batches(*, start_step, num_steps, seed=7, context=None,
                   shuffle_buffer=None):
  """The record indices of each batch, as a list of int lists."""
  dataset = input_lib.train_dataset(
      records=_records(), num_records=NUM_RECORDS, decode_fn=_decode,
      input_context=context or _context(), global_batch_size=GLOBAL_BATCH,
      seed=seed, start_step=start_step, shuffle_buffer=shuffle_buffer)
  batches = []
  for images, labels in dataset.take(num_steps).as_numpy_iterator():
    np.testing.assert_array_equal(images // 10 % 3, labels)  # Still paired.
    batches.append((images // 10).tolist())
  return batches


def _epochs(batches):
  return [sum(batches[e * STEPS_PER_EPOCH:(e + 1) * STEPS_PER_EPOCH], [])
          for e in range(len(batches) // STEPS_PER_EPOCH)]


@pytest.mark.parametrize("shuffle_buffer", [None, 8])
def test_each_epoch_is_a_new_permutation_of_distinct_records(shuffle_buffer):
  batches = _train_batches(start_step=0, num_steps=3 * STEPS_PER_EPOCH,
                           shuffle_buffer=shuffle_buffer)
  assert all(len(batch) == GLOBAL_BATCH for batch in batches)
  epochs = _epochs(batches)
  for epoch in epochs:
    assert len(set(epoch)) == len(epoch) == STEPS_PER_EPOCH * GLOBAL_BATCH
    assert set(epoch) <= set(range(NUM_RECORDS))
  assert epochs[0] != epochs[1] != epochs[2]
  assert epochs[0] != sorted(epochs[0])
  if shuffle_buffer:
    # Blocks are permuted within themselves and kept in order.
    assert set(epochs[0][:shuffle_buffer]) == set(range(shuffle_buffer))


@pytest.mark.parametrize("shuffle_buffer", [None, 8])
@pytest.mark.parametrize("start_step", [1, STEPS_PER_EPOCH - 1,
                                        STEPS_PER_EPOCH,
                                        2 * STEPS_PER_EPOCH + 2])
def test_starting_at_a_step_continues_the_same_stream(start_step,
                                                      shuffle_buffer):
  total = 3 * STEPS_PER_EPOCH
  from_zero = _train_batches(start_step=0, num_steps=total,
                             shuffle_buffer=shuffle_buffer)
  resumed = _train_batches(start_step=start_step, num_steps=total - start_step,
                           shuffle_buffer=shuffle_buffer)
  assert resumed == from_zero[start_step:]


@pytest.mark.parametrize("start_step", [0, STEPS_PER_EPOCH - 1])
def test_two_pipelines_with_half_the_batch_see_the_same_examples(start_step):
  num_steps = 2 * STEPS_PER_EPOCH
  one = _train_batches(start_step=start_step, num_steps=num_steps)
  halves = [_train_batches(start_step=start_step, num_steps=num_steps,
                           context=_context(2, i)) for i in range(2)]
  assert all(len(batch) == GLOBAL_BATCH // 2 for half in halves
             for batch in half)
  for step, (first, second) in enumerate(zip(*halves)):
    assert collections.Counter(first + second) == collections.Counter(
        one[step]), step
    assert not set(first) & set(second)


def test_the_seed_decides_the_order():
  num_steps = 2 * STEPS_PER_EPOCH
  seven = _train_batches(start_step=0, num_steps=num_steps, seed=7)
  assert _train_batches(start_step=0, num_steps=num_steps, seed=7) == seven
  eight = _train_batches(start_step=0, num_steps=num_steps, seed=8)
  assert eight != seven
  for a, b in zip(_epochs(seven), _epochs(eight)):
    assert a != b


def test_too_few_records_for_one_global_batch_is_an_error():
  with pytest.raises(ValueError, match="cannot fill one global batch"):
    input_lib.train_dataset(
        records=_records(), num_records=NUM_RECORDS, decode_fn=_decode,
        input_context=_context(), global_batch_size=NUM_RECORDS + 1, seed=0,
        start_step=0)


@pytest.mark.parametrize("pipelines", [1, 2, 3])
def test_eval_dataset_keeps_every_example_once(pipelines):
  global_batch = 2 * pipelines
  seen = []
  for pipeline_id in range(pipelines):
    dataset = input_lib.eval_dataset(
        records=_records(), decode_fn=_decode,
        input_context=_context(pipelines, pipeline_id),
        global_batch_size=global_batch)
    for images, labels in dataset.as_numpy_iterator():
      assert 1 <= len(images) <= global_batch // pipelines
      np.testing.assert_array_equal(images // 10 % 3, labels)
      seen.extend((images // 10).tolist())
  assert sorted(seen) == list(range(NUM_RECORDS))
