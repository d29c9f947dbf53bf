"""ctl.io.checkpoint_state: the state file a CheckpointManager writes, read
and written back as the manager would."""

import pytest
import tensorflow as tf

from ctl.io import checkpoint_state


def _managed_state(tmp_path, saves: int) -> bytes:
  """The state file a real CheckpointManager writes after `saves` saves."""
  checkpoint = tf.train.Checkpoint(step=tf.Variable(0))
  manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=5)
  for _ in range(saves):
    manager.save()
  return (tmp_path / "checkpoint").read_bytes()


def test_a_managers_state_file_lists_its_checkpoints_oldest_first(tmp_path):
  listed = checkpoint_state.parse(_managed_state(tmp_path, 3))
  assert listed.names == ("ckpt-1", "ckpt-2", "ckpt-3")
  assert listed.latest == "ckpt-3"
  assert sorted(listed.stamps) == ["ckpt-1", "ckpt-2", "ckpt-3"]
  assert listed.stamps["ckpt-1"] <= listed.stamps["ckpt-3"]


def test_written_back_it_parses_to_the_same_listing_and_save_times(tmp_path):
  listed = checkpoint_state.parse(_managed_state(tmp_path, 2))
  prefixes = [str(tmp_path / name) for name in listed.names]
  stamps = {str(tmp_path / n): s for n, s in listed.stamps.items()}
  again = checkpoint_state.parse(checkpoint_state.text(prefixes, stamps))
  assert again == listed
  state = tf.train.get_checkpoint_state(str(tmp_path))  # TensorFlow agrees.
  assert state.model_checkpoint_path == str(tmp_path / "ckpt-2")


def test_a_latest_missing_from_the_list_is_listed_last():
  text = (
    b'model_checkpoint_path: "ckpt-9"\nall_model_checkpoint_paths: "ckpt-1"\n'
  )
  assert checkpoint_state.parse(text).names == ("ckpt-1", "ckpt-9")


@pytest.mark.parametrize(
  "text",
  [
    b"",
    b"garbage {",
    b"\xff\xfe\x00binary",
    b'all_model_checkpoint_paths: "ckpt-1"',
  ],
  ids=["empty", "garbage", "binary", "no latest"],
)
def test_a_damaged_state_file_is_damaged(text):
  with pytest.raises(checkpoint_state.Damaged):
    checkpoint_state.parse(text)
