"""ctl.distributed.peers: a worker waits for its peers in Python, with a limit.

Real sockets on loopback: a peer that listens is found at once; one that
never starts is named every so often and given up on with one sentence.
"""

import contextlib
import socket

import pytest

from ctl.distributed import cluster
from ctl.distributed import peers
from ctl.errors import Stalled


@contextlib.contextmanager
def _worker_zero_of_two(*, peer_listens: bool):
  """Yields worker 0 of two, on loopback ports held until the block ends.

  Worker 0's port is bound with SO_REUSEADDR and not listened on:
  `wait_for_peers` listens there as a worker does, and no process that asks
  for a free port is given it. Worker 1's port is listened on (a peer that
  started) or only bound (one that never starts: connections are refused
  and no other process can take the port).
  """
  with socket.socket() as mine, socket.socket() as theirs:
    mine.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    mine.bind(("", 0))
    theirs.bind(("localhost", 0))
    if peer_listens:
      theirs.listen()
    yield cluster.ClusterInfo(
      task_type="worker",
      task_index=0,
      workers=tuple(
        f"localhost:{held.getsockname()[1]}" for held in (mine, theirs)
      ),
    )


def test_a_listening_peer_is_found_at_once():
  with _worker_zero_of_two(peer_listens=True) as info:
    peers.wait_for_peers(info, timeout_secs=30)


def test_a_peer_that_never_starts_is_named_then_given_up_on():
  lines = []
  with _worker_zero_of_two(peer_listens=False) as info:
    theirs = info.workers[1]
    with pytest.raises(Stalled, match=rf"waiting for worker 1 \({theirs}\)"):
      peers.wait_for_peers(
        info,
        timeout_secs=1.0,
        report_every_secs=0.3,
        poll_secs=0.05,
        log=lambda fmt, *args: lines.append(fmt % args),
      )
  assert lines and all(f"worker 1 ({theirs})" in line for line in lines)


def test_a_single_worker_waits_for_no_one():
  peers.wait_for_peers(cluster.ClusterInfo(), timeout_secs=0.001)
