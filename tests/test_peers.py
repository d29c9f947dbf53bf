"""ctl.distributed.peers: a worker waits for its peers in Python, with a limit.

Real sockets on loopback: a peer that listens is found at once; one that
never starts is named every so often and given up on with one sentence.
"""

import socket

import pytest

from ctl.distributed import cluster
from ctl.distributed import peers
from ctl.errors import Stalled


def _worker_zero_of(*addresses):
  return cluster.ClusterInfo(
    task_type="worker", task_index=0, workers=tuple(addresses)
  )


def test_a_listening_peer_is_found_at_once():
  mine, theirs = (f"localhost:{p}" for p in cluster.free_ports(2))
  with socket.socket() as peer:
    peer.bind(("localhost", int(theirs.rsplit(":", 1)[1])))
    peer.listen()
    peers.wait_for_peers(_worker_zero_of(mine, theirs), timeout_secs=30)


def test_a_peer_that_never_starts_is_named_then_given_up_on():
  mine, theirs = (f"localhost:{p}" for p in cluster.free_ports(2))
  lines = []
  with pytest.raises(Stalled, match=rf"waiting for worker 1 \({theirs}\)"):
    peers.wait_for_peers(
      _worker_zero_of(mine, theirs),
      timeout_secs=1.0,
      report_every_secs=0.3,
      poll_secs=0.05,
      log=lambda fmt, *args: lines.append(fmt % args),
    )
  assert lines and all(f"worker 1 ({theirs})" in line for line in lines)


def test_a_single_worker_waits_for_no_one():
  peers.wait_for_peers(cluster.ClusterInfo(), timeout_secs=0.001)
