"""ctl.checkpoint.checkpointing: what is saved, where, and which checkpoint comes back."""

import logging
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from ctl.checkpoint import checkpointing
from ctl.errors import UserError
from trainer import model as model_lib
from trainer.testing import FAST_FLAGS
from trainer.testing import read_summary
from trainer.testing import run_trainer

IMAGE_SHAPE = (8, 8, 3)


def _state(num_classes=3, dropout=0.0, seed=0):
  """A model, a built optimizer and a step, in a tf.train.Checkpoint."""
  keras.utils.set_random_seed(seed)
  model = model_lib.build_model(
    name="small_cnn",
    num_classes=num_classes,
    image_shape=IMAGE_SHAPE,
    dropout=dropout,
  )
  optimizer = keras.optimizers.Adam(0.01)
  optimizer.build(model.trainable_variables)
  step = tf.Variable(0, dtype=tf.int64, trainable=False)
  checkpoint = tf.train.Checkpoint(
    model=model, optimizer=optimizer, global_step=step
  )
  return model, optimizer, step, checkpoint


def _kernel(model):
  return model.get_layer("logits").kernel


def _save_at(checkpointer, step, model, value):
  """Sets a recognizable weight, then saves at `step`."""
  _kernel(model).assign(tf.fill(_kernel(model).shape, value))
  return checkpointer.save(step)


def _restore_messages(caplog):
  return " ".join(r.getMessage() for r in caplog.records)


@pytest.fixture
def saved(tmp_path):
  """A chief checkpoint directory with checkpoints at steps 10 and 20."""
  directory = str(tmp_path / "checkpoints")
  model, _, step, checkpoint = _state()
  checkpointer = checkpointing.Checkpointer(
    checkpoint=checkpoint, directory=directory, is_chief=True, keep=3
  )
  step.assign(10)
  first = _save_at(checkpointer, 10, model, 1.0)
  step.assign(20)
  second = _save_at(checkpointer, 20, model, 2.0)
  checkpointer.close()
  return directory, first, second


def _restore_into_new_state(directory, **state_kwargs):
  model, _, step, checkpoint = _state(seed=1, **state_kwargs)
  checkpointer = checkpointing.Checkpointer(
    checkpoint=checkpoint, directory=directory, is_chief=True, keep=3
  )
  path = checkpointer.restore_latest()
  checkpointer.close()
  return path, model, step


def test_restores_the_newest_checkpoint(saved):
  directory, _, second = saved
  path, model, step = _restore_into_new_state(directory)
  assert path == second
  assert int(step.numpy()) == 20
  np.testing.assert_array_equal(_kernel(model).numpy(), 2.0)


def test_empty_directory_restores_nothing(tmp_path):
  path, model, step = _restore_into_new_state(str(tmp_path / "none"))
  assert path is None
  assert int(step.numpy()) == 0
  assert not np.all(_kernel(model).numpy() == 2.0)


def test_truncated_latest_checkpoint_falls_back_to_the_previous(saved, caplog):
  directory, first, second = saved
  (data,) = tf.io.gfile.glob(second + ".data-*")
  size = os.path.getsize(data)
  with open(data, "r+b") as f:
    f.truncate(size // 2)
  with caplog.at_level(logging.WARNING):
    path, model, step = _restore_into_new_state(directory)
  assert path == first
  assert int(step.numpy()) == 10
  np.testing.assert_array_equal(_kernel(model).numpy(), 1.0)
  warnings = [
    r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
  ]
  assert any(second in m and "previous" in m for m in warnings), warnings


def test_checkpoint_with_a_missing_data_file_falls_back(saved, caplog):
  directory, first, second = saved
  for data in tf.io.gfile.glob(second + ".data-*"):
    os.remove(data)
  with caplog.at_level(logging.WARNING):
    path, _, step = _restore_into_new_state(directory)
  assert path == first and int(step.numpy()) == 10
  assert second in _restore_messages(caplog)


def _truncate_indexes(*prefixes: str) -> None:
  """Cuts the index file of each checkpoint `prefixes` names: unreadable."""
  for prefix in prefixes:
    with open(prefix + ".index", "r+b") as f:
      f.truncate(10)


def test_no_readable_checkpoint_is_a_user_error(saved):
  directory, first, second = saved
  _truncate_indexes(first, second)
  with pytest.raises(UserError, match="can be read") as error:
    _restore_into_new_state(directory)
  assert "\n" not in str(error.value)


@pytest.mark.parametrize(
  "content",
  [b"garbage text\n", b"\x00\xff\xfe binary \x80", b""],
  ids=["text", "binary", "empty"],
)
def test_damaged_state_file_restores_the_newest_checkpoint_file(
  saved, caplog, content
):
  directory, first, second = saved
  state_file = os.path.join(directory, "checkpoint")
  with open(state_file, "wb") as f:
    f.write(content)
  with caplog.at_level(logging.WARNING):
    path, model, step = _restore_into_new_state(directory)
  assert path == second and int(step.numpy()) == 20
  np.testing.assert_array_equal(_kernel(model).numpy(), 2.0)
  said = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
  assert len(said) == 1 and state_file in said[0] and second in said[0], said
  # Rewritten after the restore: both checkpoints listed, the newest latest.
  state = tf.train.get_checkpoint_state(directory)
  assert state.model_checkpoint_path == second
  assert list(state.all_model_checkpoint_paths) == [first, second]


@pytest.mark.parametrize(
  "listed", [("ckpt-999",), ("ckpt-10", "ckpt-999")], ids=["alone", "after"]
)
def test_state_file_naming_a_missing_checkpoint_restores_the_newest_file(
  saved, caplog, listed
):
  directory, first, second = saved
  state_file = os.path.join(directory, "checkpoint")
  with open(state_file, "w") as f:
    f.write('model_checkpoint_path: "ckpt-999"\n')
    f.writelines(f'all_model_checkpoint_paths: "{n}"\n' for n in listed)
  with caplog.at_level(logging.WARNING):
    path, _, step = _restore_into_new_state(directory)
  assert path == second and int(step.numpy()) == 20
  said = [
    r.getMessage() for r in caplog.records if "ckpt-999" in r.getMessage()
  ]
  assert len(said) == 1 and state_file in said[0] and second in said[0], said
  state = tf.train.get_checkpoint_state(directory)
  assert state.model_checkpoint_path == second
  assert list(state.all_model_checkpoint_paths) == [first, second]


def test_damaged_state_file_is_not_rewritten_by_a_failed_restore(saved):
  directory, first, second = saved
  state_file = os.path.join(directory, "checkpoint")
  with open(state_file, "wb") as f:
    f.write(b"garbage")
  _truncate_indexes(first, second)
  with pytest.raises(UserError, match="damaged") as error:
    _restore_into_new_state(directory)
  assert "\n" not in str(error.value)
  with open(state_file, "rb") as f:
    assert f.read() == b"garbage"


def test_damaged_state_file_without_checkpoint_files_is_a_user_error(tmp_path):
  directory = tmp_path / "checkpoints"
  directory.mkdir()
  (directory / "checkpoint").write_bytes(b"\x00")
  with pytest.raises(UserError, match="damaged"):
    _restore_into_new_state(str(directory))


def test_checkpoint_of_a_different_model_is_a_user_error(saved):
  directory, _, second = saved
  with pytest.raises(UserError) as error:
    _restore_into_new_state(directory, num_classes=5)
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith(
    f"The checkpoint {second} was written by a different model"
  )
  assert message.endswith(".")
  assert "--checkpoint_dir" in message


def test_weights_fingerprint_follows_the_values():
  model, optimizer, _, _ = _state(seed=3)
  same_model, same_optimizer, _, _ = _state(seed=3)
  other_model, other_optimizer, _, _ = _state(seed=4)
  fingerprint = checkpointing.weights_fingerprint(model, optimizer)
  assert len(fingerprint) == 64
  assert (
    checkpointing.weights_fingerprint(same_model, same_optimizer) == fingerprint
  )
  assert (
    checkpointing.weights_fingerprint(other_model, other_optimizer)
    != fingerprint
  )

  kernel = _kernel(same_model)
  changed = kernel.numpy()
  changed[0, 0] = np.nextafter(changed[0, 0], np.float32(np.inf))
  kernel.assign(changed)
  assert (
    checkpointing.weights_fingerprint(same_model, same_optimizer) != fingerprint
  )
  # Optimizer state counts too.
  same_optimizer.variables[-1].assign_add(
    tf.ones_like(same_optimizer.variables[-1])
  )
  changed_both = checkpointing.weights_fingerprint(same_model, same_optimizer)
  kernel.assign(_kernel(model))
  assert checkpointing.weights_fingerprint(same_model, same_optimizer) not in (
    fingerprint,
    changed_both,
  )


def test_seed_generator_states_finds_the_dropout_rng_state():
  model, _, _, _ = _state(dropout=0.5)
  (dropout,) = [
    layer for layer in model.layers if isinstance(layer, keras.layers.Dropout)
  ]
  states = checkpointing.seed_generator_states(model)
  assert [v.path for v in states] == [dropout.seed_generator.state.path]
  before = states[0].numpy().copy()
  model(np.ones((2, *IMAGE_SHAPE), np.float32), training=True)
  assert not np.array_equal(states[0].numpy(), before)  # Drawing advances it.
  assert checkpointing.seed_generator_states(_state(dropout=0.0)[0]) == []


def test_dropout_rng_state_round_trips_through_a_checkpoint(tmp_path):
  model, _, _, _ = _state(dropout=0.5)
  checkpoint = tf.train.Checkpoint(
    model=model, rng=checkpointing.seed_generator_states(model)
  )
  images = np.ones((4, *IMAGE_SHAPE), np.float32)
  model(images, training=True)
  path = checkpoint.save(str(tmp_path / "ckpt"))
  expected = model(images, training=True).numpy()

  restored, _, _, _ = _state(dropout=0.5, seed=9)
  tf.train.Checkpoint(
    model=restored, rng=checkpointing.seed_generator_states(restored)
  ).restore(path).assert_existing_objects_matched()
  np.testing.assert_array_equal(
    restored(images, training=True).numpy(), expected
  )


def test_non_chief_saves_into_a_scratch_dir_that_close_removes(saved):
  directory, _, second = saved
  before = sorted(os.listdir(directory))
  model, _, step, checkpoint = _state(seed=1)
  published = []
  worker = checkpointing.Checkpointer(
    checkpoint=checkpoint,
    directory=directory,
    is_chief=False,
    keep=3,
    on_saved=lambda: published.append(True),
  )
  # Non-chiefs still read the real directory.
  assert worker.restore_latest() == second
  assert int(step.numpy()) == 20
  step.assign(30)
  path = _save_at(worker, 30, model, 3.0)
  scratch = os.path.dirname(path)
  assert not path.startswith(directory)
  assert tf.io.gfile.exists(path + ".index")
  worker.close()
  assert not os.path.exists(scratch)
  assert sorted(os.listdir(directory)) == before
  assert tf.train.latest_checkpoint(directory) == second
  assert not published  # Only the chief publishes.


def _publishing(checkpoint, directory, **kwargs):
  """A chief's Checkpointer, and the list of what each `on_saved` saw as
  the latest checkpoint (what a publish would upload)."""
  published = []
  checkpointer = checkpointing.Checkpointer(
    checkpoint=checkpoint,
    directory=directory,
    is_chief=True,
    on_saved=lambda: published.append(tf.train.latest_checkpoint(directory)),
    **kwargs,
  )
  return checkpointer, published


def test_async_save_then_sync_is_complete_and_published_once(tmp_path):
  directory = str(tmp_path / "async")
  model, _, step, checkpoint = _state()
  checkpointer, published = _publishing(
    checkpoint, directory, keep=2, async_save=True
  )
  step.assign(5)
  path = _save_at(checkpointer, 5, model, 5.0)
  _kernel(model).assign(tf.zeros_like(_kernel(model)))  # After the save.
  checkpointer.sync()
  assert published == [path]
  checkpointer.sync()
  checkpointer.close()
  assert published == [path]

  restored_path, restored, restored_step = _restore_into_new_state(directory)
  assert restored_path == path
  assert int(restored_step.numpy()) == 5
  np.testing.assert_array_equal(_kernel(restored).numpy(), 5.0)


def test_each_chief_save_is_published_after_it_is_written(tmp_path):
  directory = str(tmp_path / "sync")
  model, _, _, checkpoint = _state()
  checkpointer, published = _publishing(checkpoint, directory, keep=1)
  paths = [_save_at(checkpointer, step, model, float(step)) for step in (1, 2)]
  assert published == paths
  checkpointer.close()
  assert published == paths
  # keep=1: only the newest checkpoint is left.
  assert tf.io.gfile.glob(os.path.join(directory, "ckpt-1*")) == []


def _batch_checkpointer(directory, global_batch_size, with_batch=True):
  """A chief's Checkpointer of a fresh state that records its global batch
  (`with_batch`; False: as before checkpoints recorded it)."""
  model, _, step, checkpoint = _state()
  checkpointer = checkpointing.Checkpointer(
    checkpoint=checkpoint,
    directory=directory,
    is_chief=True,
    keep=5,
    global_batch_size=global_batch_size if with_batch else None,
  )
  return checkpointer, step


def test_a_resume_with_another_global_batch_says_the_data_order_differs(
  tmp_path, caplog
):
  directory = str(tmp_path / "checkpoints")
  old, step = _batch_checkpointer(directory, 64, with_batch=False)
  step.assign(10)
  old.save(10)  # From before the batch was recorded: nothing to compare.
  first, step = _batch_checkpointer(directory, 64)
  with caplog.at_level(logging.WARNING):
    first.restore_latest()
  assert first.data_order_differs_from_step is None
  step.assign(20)
  first.save(20)

  second, step = _batch_checkpointer(directory, 32)
  with caplog.at_level(logging.WARNING):
    second.restore_latest()
  said = [
    r.getMessage() for r in caplog.records if "data order" in r.getMessage()
  ]
  assert len(said) == 1, said
  assert "global batch of 64" in said[0] and "32" in said[0]
  assert "ckpt-20" in said[0]
  assert second.data_order_differs_from_step == 20
  step.assign(30)
  second.save(30)

  # A later resume with the same batch still knows, from the checkpoint.
  third, _ = _batch_checkpointer(directory, 32)
  third.restore_latest()
  assert third.data_order_differs_from_step == 20
  assert len([r for r in caplog.records if "data order" in r.getMessage()]) == 1


@pytest.mark.processes
def test_a_run_resumed_with_another_batch_size_says_so_in_log_and_summary(
  tmp_path,
):
  model_dir = str(tmp_path / "run")
  flags = (*FAST_FLAGS, "--eval_every_steps=0", f"--model_dir={model_dir}")
  run_trainer(*flags, "--train_steps=20")
  assert read_summary(model_dir)["data_order_differs_from_step"] is None
  resumed = run_trainer(
    *flags, "--train_steps=40", "--per_replica_batch_size=16"
  )
  said = [line for line in resumed.stderr.splitlines() if "data order" in line]
  assert len(said) == 1 and "global batch of 32" in said[0], said
  assert read_summary(model_dir)["data_order_differs_from_step"] == 20
