"""Naming the lost peer from TensorFlow's own error texts (ctl.distributed.peer_loss).

The messages are the ones TensorFlow 2.21 raised on a cluster of network
namespaces (benchmarks/cluster): the chief when a worker's link was cut, the
cut worker itself, and the chief when a worker's node vanished.
"""

import pytest
import tensorflow as tf

from ctl.distributed import cluster as cluster_lib
from ctl.distributed import peer_loss

WORKERS = ("host-0:23500", "host-1:23500", "host-2:23500")

UNHEALTHY = (
  "Graph execution error:\n\nDetected at node while/CollectiveReduceV2 "
  "defined at (most recent call last):\n  File ...\nCollective ops is aborted "
  "by: Error reported from /job:worker/task:1: The following tasks are "
  "unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1\n"
  "The tasks have crashed. "
  "[type.googleapis.com/tensorflow.CoordinationServiceError='\"\\n\\n"
  "\\x06worker\\x10\\x01']"
)
HEARTBEAT = (
  "Graph execution error:\n\nDetected at node while/CollectiveReduceV2\n"
  "Collective ops is aborted by: Deadline Exceeded\nRPC: "
  "/tensorflow.CoordinationService/Heartbeat\nThe error could be from a "
  "previous operation. Restart your program to reset."
)
# Worker 2 relays what worker 1's vanished node did to its own receive.
VANISHED = (
  "Graph execution error:\nAdditional GRPC error information from remote "
  "target /job:worker/replica:0/task:2 while calling /tensorflow.WorkerServ"
  'ice/RecvBuf:\n:UNKNOWN:Error received from peer  {grpc_message:"Collecti'
  "ve ops is aborted by: Socket closed\nAdditional GRPC error information "
  "from remote target /job:worker/replica:0/task:1 while calling /tensorflow"
  ".WorkerService/RecvBuf"
)
# A replacement node's worker 1 connected before the chief noticed the loss.
REPLACED = (
  "Graph execution error:\nDetected at node while/CollectiveReduceV2\n"
  "Collective ops is aborted by: Error reported from /job:worker/task:1: "
  "/job:worker/replica:0/task:1 unexpectedly tried to connect with a "
  "different incarnation. It has likely restarted."
)


def _info(index, workers=WORKERS):
  return cluster_lib.ClusterInfo(
    task_type="worker", task_index=index, workers=workers
  )


@pytest.mark.parametrize(
  ("error", "index", "expected"),
  [
    (tf.errors.UnavailableError(None, None, UNHEALTHY), 0,
     "lost contact with worker 1 (host-1:23500)"),
    (tf.errors.DeadlineExceededError(None, None, HEARTBEAT), 1,
     "lost contact with worker 0 (host-0:23500), which runs the "
     "coordination service"),
    (tf.errors.UnavailableError(None, None, VANISHED), 0,
     "lost contact with worker 1 (host-1:23500)"),
    (tf.errors.AbortedError(None, None, REPLACED), 0,
     "lost contact with worker 1 (host-1:23500), which restarted"),
  ],
)  # fmt: skip
def test_a_lost_peer_is_named_by_rank_and_address(error, index, expected):
  assert peer_loss.describe(error, _info(index)) == expected


def test_with_a_chief_task_the_ranks_count_it_first():
  info = cluster_lib.ClusterInfo(
    task_type="chief", task_index=0, chief=("boss:1",), workers=WORKERS[1:]
  )
  error = tf.errors.UnavailableError(None, None, UNHEALTHY)
  assert (
    peer_loss.describe(error, info)
    == "lost contact with worker 2 (host-2:23500)"
  )
  beat = tf.errors.DeadlineExceededError(None, None, HEARTBEAT)
  assert peer_loss.describe(beat, info).startswith(
    "lost contact with worker 0 (boss:1)"
  )


@pytest.mark.parametrize(
  "error",
  [
    tf.errors.InvalidArgumentError(None, None, UNHEALTHY),  # Not the network.
    tf.errors.UnavailableError(None, None, "Unknown service"),  # Not a peer.
    ValueError(VANISHED),
  ],
)
def test_other_errors_are_left_alone(error):
  assert peer_loss.describe(error, _info(0)) is None


def test_one_worker_has_no_peers_to_lose():
  error = tf.errors.UnavailableError(None, None, UNHEALTHY)
  assert peer_loss.describe(error, cluster_lib.ClusterInfo()) is None


def test_its_own_task_is_not_a_lost_peer():
  own = tf.errors.UnavailableError(
    None, None, "remote target /job:worker/replica:0/task:0 went away"
  )
  assert peer_loss.describe(own, _info(0)) is None


def test_a_broken_connection_to_an_unnamed_peer_is_still_a_lost_peer():
  error = tf.errors.UnavailableError(
    None, None, "Collective ops: Socket closed"
  )
  assert (
    peer_loss.describe(error, _info(1))
    == "lost contact with a peer (Socket closed)"
  )


# The chief after a node was lost (CI, 2026-12-05): worker 2 saw worker 1's
# node vanish first and left; the coordination service then reported worker 2
# unhealthy, and the chief named worker 2 (the ledger said so; the check's
# node_lost failed). Worker 2 now tells the cluster whom it lost before it
# leaves, and its sentence comes first in what the chief's collective gets.
TOLD = (
  "Graph execution error:\nDetected at node while/CollectiveReduceV2\n"
  "Collective ops is aborted by: Error reported from /job:worker/task:2: "
  "ctl: lost contact with worker 1 (host-1:23500).\nThe following tasks are "
  "unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:2\n"
  "The tasks have crashed."
)


def test_the_peer_another_worker_lost_first_is_the_one_named():
  error = tf.errors.UnavailableError(None, None, TOLD)
  assert (
    peer_loss.describe(error, _info(0))
    == "lost contact with worker 1 (host-1:23500)"
  )
  # The worker it names cannot be told that it is lost.
  assert peer_loss.describe(error, _info(1)) == (
    "lost contact with worker 2 (host-2:23500)"
  )


def test_a_worker_tells_the_others_what_it_lost_in_the_words_they_read():
  told = []
  peer_loss.tell_the_others(
    "lost contact with worker 1 (host-1:23500)",
    tf.errors.UnavailableError(None, None, VANISHED),
    report=lambda code, message: told.append((code, message)),
  )
  ((code, message),) = told
  assert code == tf.errors.UNAVAILABLE
  relayed = f"Error reported from /job:worker/task:2: {message}"
  assert (
    peer_loss.describe(
      tf.errors.UnavailableError(None, None, relayed), _info(0)
    )
    == "lost contact with worker 1 (host-1:23500)"
  )
  # What it was told itself, or a lost coordination service, it keeps.
  for sentence, error in [
    ("lost contact with worker 1 (host-1:23500)",
     tf.errors.UnavailableError(None, None, TOLD)),
    ("lost contact with worker 0 (host-0:23500), which runs the coordination "
     "service", tf.errors.DeadlineExceededError(None, None, HEARTBEAT)),
  ]:  # fmt: skip
    told.clear()
    peer_loss.tell_the_others(sentence, error, report=lambda *a: told.append(a))
    assert told == []


def test_a_worker_that_cannot_tell_the_others_leaves_all_the_same():
  def refused(code, message):
    raise tf.errors.UnavailableError(None, None, "failed to connect")

  peer_loss.tell_the_others(
    "lost contact with worker 1 (host-1:23500)",
    tf.errors.UnavailableError(None, None, VANISHED),
    report=refused,
  )  # Returns: a worker cut off from the service still exits.
