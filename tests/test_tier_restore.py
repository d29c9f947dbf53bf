"""ctl.checkpoint.tiers.tier_restore: the agreed restore across tiers, with a peer
that never answers (a real listening socket that accepts and stays silent,
as a SIGSTOPped node agent's does) and a real bucket checkpoint."""

import socket

import numpy as np
import pytest
import tensorflow as tf

from ctl.checkpoint.tiers import local_tier
from ctl.checkpoint.tiers import peer_tier
from ctl.checkpoint.tiers import tier_restore


@pytest.fixture
def frozen_peer():
  """The port of a service that accepts connections and never answers; the
  fixture's `asked()` counts the connections made to it."""
  listener = socket.socket()
  listener.bind(("127.0.0.1", 0))
  listener.listen(16)  # The kernel completes each handshake: as when frozen.
  held = []

  def asked():
    listener.setblocking(False)
    while True:
      try:
        held.append(listener.accept()[0])
      except BlockingIOError:
        return len(held)

  yield listener.getsockname()[1], asked
  for connection in held:
    connection.close()
  listener.close()


def _bucket_checkpoint(bucket_dir: str, step: int) -> None:
  checkpoint = tf.train.Checkpoint(weights=tf.Variable(np.full(10, step)))
  manager = tf.train.CheckpointManager(checkpoint, bucket_dir, max_to_keep=2)
  manager.save(checkpoint_number=step)


def test_a_frozen_peer_is_asked_once_and_the_restore_falls_back(
  frozen_peer, tmp_path
):
  """Worker 1 lost its tier; worker 0 lists steps 130 and 120 but its node
  agent is frozen. The restore used to wait 60 s for step 130, another 60 s
  for step 120 from the same peer, then take the bucket's step 100. Now the
  peer is asked once (one `PEER_SILENCE_SECS`), then the bucket's step."""
  port, asked = frozen_peer
  bucket = str(tmp_path / "bucket")
  _bucket_checkpoint(bucket, 100)
  peer_row = [131, 121, port, 101]  # Steps sent as step + 1.

  # How worker 0 restores each candidate: 130 and 120 locally, 100 from
  # the bucket.
  peer_outcomes = iter([0, 0, tier_restore.TIERS.index("bucket")])
  outcomes, restored = [], []

  def gather(row):
    if len(row) > 1:  # The first exchange: the steps each holds.
      return np.asarray([peer_row, row], dtype=float)
    outcomes.append(row[0])
    return np.asarray([[next(peer_outcomes)], row], dtype=float)

  result = tier_restore.restore_agreed(
    tier=local_tier.LocalTier(str(tmp_path / "tier")),
    bucket_dir=bucket,
    hosts=["127.0.0.1", "127.0.0.1"],
    service_port=0,
    gather=gather,
    restore=lambda prefix: restored.append(prefix) or True,
  )
  assert asked() == 1
  assert outcomes == [-1, -1, tier_restore.TIERS.index("bucket")]
  assert (result.step, result.tier) == (100, "bucket")
  assert restored == [f"{bucket}/ckpt-100"]
  assert peer_tier.PEER_SILENCE_SECS * asked() <= 15


@pytest.mark.parametrize(
  "offer",
  [
    tier_restore.Offer(),
    tier_restore.Offer((0,), 0, 0),
    tier_restore.Offer((40, 35), 8765, 30),
    tier_restore.Offer((), 8765, None),
  ],
)
def test_an_offer_travels_as_a_row_of_numbers_and_back(offer):
  """The exchange carries each worker's offer as numbers (an all-reduce);
  step 0 and 'none' stay apart."""
  row = offer.row()
  assert all(isinstance(x, int) for x in row)
  assert tier_restore.Offer.from_row(np.array(row, dtype=np.int64)) == offer
