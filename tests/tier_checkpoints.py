"""Small real checkpoints for the tier tests (tests/test_local_tier.py,
test_bucket_tier.py, test_node_tiers.py, test_peer_tier.py)."""

import os

import numpy as np
import tensorflow as tf

from ctl.checkpoint.tiers import local_tier


def checkpoint_of(value: float) -> tf.train.Checkpoint:
  """A checkpoint of 1000 weights, each `value`."""
  return tf.train.Checkpoint(weights=tf.Variable(np.full(1000, value)))


def value_of(prefix: str) -> float:
  """The weights' value in the checkpoint at `prefix`."""
  return float(
    tf.train.load_checkpoint(prefix).get_tensor(
      "weights/.ATTRIBUTES/VARIABLE_VALUE"
    )[0]
  )


def cut_short(tier: local_tier.LocalTier, step: int) -> None:
  """Truncates the data file of committed `step` to half its size."""
  (data,) = tf.io.gfile.glob(tier.prefix(step) + ".data-*")
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)
