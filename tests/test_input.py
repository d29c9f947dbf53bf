"""ctl.data.input: the data position is a pure function of (seed, step).

Every property is checked for three kinds of records: in-memory arrays and a
real ArrayRecord file (both read by index) and a streamed dataset.
"""

import collections
import threading

from array_record.python import array_record_data_source
from array_record.python import array_record_module
import numpy as np
import pytest
import tensorflow as tf

from ctl.data import input as input_lib

NUM_RECORDS = 22  # Not a multiple of the batch: each epoch drops 2 records.
GLOBAL_BATCH = 4
STEPS_PER_EPOCH = NUM_RECORDS // GLOBAL_BATCH
KINDS = ("memory", "array_record", "streamed")


class CountingSource:
  """A real random-access source that remembers every batch of keys read."""

  def __init__(self, source):
    self._source = source
    self._lock = threading.Lock()
    self.calls = []

  def __len__(self):
    return len(self._source)

  def __getitems__(self, keys):
    with self._lock:
      self.calls.append(tuple(keys))
    return self._source.__getitems__(keys)


@pytest.fixture(scope="module")
def array_record_path(tmp_path_factory):
  """An ArrayRecord file whose record i is the text of i."""
  return _write_array_record(
    str(tmp_path_factory.mktemp("array_record") / "records.array_record"),
    NUM_RECORDS,
  )


def _records(kind, array_record_path=None):
  """(records, decode_fn) where decode_fn maps a record to (i * 10, i % 3)."""
  indices = np.arange(NUM_RECORDS, dtype=np.int64)
  if kind == "array_record":
    source = CountingSource(
      array_record_data_source.ArrayRecordDataSource([array_record_path])
    )

    def decode_text(text):
      index = tf.strings.to_number(text, tf.int64)
      return index * 10, index % 3

    return input_lib.IndexedRecords.from_source(source), decode_text, source
  pairs = (indices, indices % 3)

  def decode(index, label):  # Stands in for an image decode.
    return index * 10, label

  if kind == "memory":
    return input_lib.IndexedRecords.from_tensors(pairs), decode, None
  return tf.data.Dataset.from_tensor_slices(pairs), decode, None


def _context(pipelines=1, pipeline_id=0):
  return tf.distribute.InputContext(
    num_input_pipelines=pipelines,
    input_pipeline_id=pipeline_id,
    num_replicas_in_sync=pipelines,
  )


@pytest.fixture(params=KINDS)
def batches_of(request, array_record_path):
  """A function: the record indices of each batch, as a list of int lists."""

  def batches(
    *, start_step, num_steps, seed=7, context=None, shuffle_buffer=None
  ):
    records, decode, _ = _records(request.param, array_record_path)
    dataset = input_lib.train_dataset(
      records=records,
      num_records=NUM_RECORDS,
      decode_fn=decode,
      input_context=context or _context(),
      global_batch_size=GLOBAL_BATCH,
      seed=seed,
      start_step=start_step,
      shuffle_buffer=shuffle_buffer,
    )
    out = []
    for images, labels in dataset.take(num_steps).as_numpy_iterator():
      np.testing.assert_array_equal(images // 10 % 3, labels)  # Paired.
      out.append((images // 10).tolist())
    return out

  batches.kind = request.param
  return batches


def _epochs(batches):
  return [
    sum(batches[e * STEPS_PER_EPOCH : (e + 1) * STEPS_PER_EPOCH], [])
    for e in range(len(batches) // STEPS_PER_EPOCH)
  ]


def test_each_epoch_is_a_new_permutation_of_distinct_records(batches_of):
  batches = batches_of(start_step=0, num_steps=3 * STEPS_PER_EPOCH)
  assert all(len(batch) == GLOBAL_BATCH for batch in batches)
  epochs = _epochs(batches)
  for epoch in epochs:
    assert len(set(epoch)) == len(epoch) == STEPS_PER_EPOCH * GLOBAL_BATCH
    assert set(epoch) <= set(range(NUM_RECORDS))
  assert epochs[0] != epochs[1] != epochs[2]
  assert epochs[0] != sorted(epochs[0])
  # Each epoch drops different records: the permutation is global.
  dropped = [frozenset(range(NUM_RECORDS)) - set(e) for e in epochs]
  assert len(set(dropped)) > 1 or batches_of.kind == "streamed"


def test_streamed_blocks_are_permuted_in_place():
  records, decode, _ = _records("streamed")
  dataset = input_lib.train_dataset(
    records=records,
    num_records=NUM_RECORDS,
    decode_fn=decode,
    input_context=_context(),
    global_batch_size=GLOBAL_BATCH,
    seed=7,
    start_step=0,
    shuffle_buffer=8,
  )
  first = [
    i // 10 for batch, _ in dataset.take(2).as_numpy_iterator() for i in batch
  ]
  assert set(first) == set(range(8)) and first != sorted(first)


@pytest.mark.parametrize(
  "start_step", [1, STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH + 2]
)
def test_starting_at_a_step_continues_the_same_stream(batches_of, start_step):
  total = 3 * STEPS_PER_EPOCH
  from_zero = batches_of(start_step=0, num_steps=total)
  resumed = batches_of(start_step=start_step, num_steps=total - start_step)
  assert resumed == from_zero[start_step:]


def _global_steps(batches_of, *, pipelines, start_step, num_steps):
  """Per step, the multiset of examples all pipelines together read."""
  per_pipeline = [
    batches_of(
      start_step=start_step, num_steps=num_steps, context=_context(pipelines, i)
    )
    for i in range(pipelines)
  ]
  for batches in per_pipeline:
    assert all(len(b) == GLOBAL_BATCH // pipelines for b in batches)
  return [collections.Counter(sum(step, [])) for step in zip(*per_pipeline)]


@pytest.mark.parametrize("start_step", [0, STEPS_PER_EPOCH - 1])
def test_two_pipelines_with_half_the_batch_see_the_same_examples(
  batches_of, start_step
):
  num_steps = 2 * STEPS_PER_EPOCH
  one = _global_steps(
    batches_of, pipelines=1, start_step=start_step, num_steps=num_steps
  )
  two = _global_steps(
    batches_of, pipelines=2, start_step=start_step, num_steps=num_steps
  )
  assert two == one
  assert all(sum(step.values()) == len(step) for step in two)  # Disjoint.


@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_a_position_reached_on_n_pipelines_continues_on_m(
  batches_of, before, after
):
  """Elastic resume: the checkpoint holds only the step; the order goes on."""
  stop = STEPS_PER_EPOCH + 2  # Mid-epoch, in the second epoch.
  total = 3 * STEPS_PER_EPOCH
  uninterrupted = _global_steps(
    batches_of, pipelines=1, start_step=0, num_steps=total
  )
  first = _global_steps(
    batches_of, pipelines=before, start_step=0, num_steps=stop
  )
  rest = _global_steps(
    batches_of, pipelines=after, start_step=stop, num_steps=total - stop
  )
  assert first + rest == uninterrupted


def test_the_seed_decides_the_order(batches_of):
  num_steps = 2 * STEPS_PER_EPOCH
  seven = batches_of(start_step=0, num_steps=num_steps, seed=7)
  assert batches_of(start_step=0, num_steps=num_steps, seed=7) == seven
  eight = batches_of(start_step=0, num_steps=num_steps, seed=8)
  for a, b in zip(_epochs(seven), _epochs(eight)):
    assert a != b


def _write_array_record(path, count):
  """An ArrayRecord file whose record i is the text of i."""
  writer = array_record_module.ArrayRecordWriter(path, "group_size:1")
  for index in range(count):
    writer.write(str(index).encode())
  writer.close()
  return path


@pytest.mark.parametrize("start_step", [0, 57])
def test_each_pipeline_fetches_only_its_share(tmp_path, start_step):
  """Counted reads of a real ArrayRecord file: no skip-scan, no other shares.

  A pipeline reads ahead of what is consumed (parallel fetches, prefetch), so
  each read is matched to the step whose share it is. Started mid-epoch, it
  reads nothing before its position.
  """
  num_records, global_batch = 200, 8
  spe = num_records // global_batch
  path = _write_array_record(str(tmp_path / "r.array_record"), num_records)
  epoch_records = []
  for pipeline_id in range(2):
    source = CountingSource(
      array_record_data_source.ArrayRecordDataSource([path])
    )
    dataset = input_lib.train_dataset(
      records=input_lib.IndexedRecords.from_source(source),
      decode_fn=lambda text: text,
      input_context=_context(2, pipeline_id),
      global_batch_size=global_batch,
      seed=7,
      start_step=start_step,
    )
    list(dataset.take(spe).as_numpy_iterator())
    share = {
      tuple(
        input_lib.train_indices(
          step=step,
          num_records=num_records,
          global_batch_size=global_batch,
          seed=7,
          pipelines=2,
          pipeline_id=pipeline_id,
        )
        .numpy()
        .tolist()
      ): step
      for step in range(start_step, start_step + 8 * spe)
    }
    size = global_batch // 2  # A call reads the shares of whole steps.
    reads = [
      call[i : i + size]
      for call in source.calls
      for i in range(0, len(call), size)
    ]
    steps = [share[read] for read in reads]  # KeyError: not its share.
    assert len(steps) == len(set(steps))  # No step read twice.
    assert min(steps) == start_step  # Nothing before the position.
    wanted = range(start_step, (start_step // spe + 1) * spe)  # The epoch.
    assert set(wanted) <= set(steps)
    fetched = sum((list(r) for r in reads if share[r] in wanted), [])
    assert len(fetched) == len(set(fetched)) == len(wanted) * global_batch // 2
    epoch_records.append(set(fetched))
  assert not epoch_records[0] & epoch_records[1]


def test_too_few_records_for_one_global_batch_is_an_error():
  records, decode, _ = _records("memory")
  with pytest.raises(ValueError, match="cannot fill one global batch"):
    input_lib.train_dataset(
      records=records,
      decode_fn=decode,
      input_context=_context(),
      global_batch_size=NUM_RECORDS + 1,
      seed=0,
      start_step=0,
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pipelines", [1, 3])
def test_eval_dataset_keeps_every_example_once(
  kind, pipelines, array_record_path
):
  global_batch = 2 * pipelines
  seen = []
  for pipeline_id in range(pipelines):
    records, decode, _ = _records(kind, array_record_path)
    dataset = input_lib.eval_dataset(
      records=records,
      decode_fn=decode,
      input_context=_context(pipelines, pipeline_id),
      global_batch_size=global_batch,
    )
    for images, labels in dataset.as_numpy_iterator():
      assert 1 <= len(images) <= global_batch // pipelines
      np.testing.assert_array_equal(images // 10 % 3, labels)
      seen.extend((images // 10).tolist())
  assert sorted(seen) == list(range(NUM_RECORDS))
