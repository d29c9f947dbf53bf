"""Naming the peer a worker lost, from TensorFlow's error.

When a node is lost or cut off (a partition, a flapping link), TensorFlow's
coordination service finds it by its heartbeats (about 10 s) and aborts every
collective: the task that runs the service (the chief, or worker 0) raises
`UnavailableError` "The following tasks are unhealthy (stopped sending
heartbeats)" naming the task as `/job:worker/task:1`, and a task that lost
the service raises `DeadlineExceededError` (or `UnavailableError`) on its
`CoordinationService/Heartbeat` RPC; a collective whose peer's node
vanished raises `UnavailableError` naming the peer as a "remote target";
and when a lost node's replacement joins before the loss was noticed, the
service aborts the collectives with `AbortedError`: the task "unexpectedly
tried to connect with a different incarnation".
A worker that names the peer it lost tells the others before it leaves
(`tell_the_others`, as TensorFlow's own failure handler propagates an
error): the service reports a worker that left as "unhealthy", and without
its word a peer that only saw it stop would name it instead of the node
that was lost first.
All are the cluster's fault, not the
program's: `describe` turns them into one sentence that names the peer by
rank and address, as TF_CONFIG gives it ("lost contact with worker 1
(host-1:23500)"), so a run ends with that line, a `peer_lost` ledger event
and the restartable exit code, instead of a 60-line traceback read as a
crash. Any other error is left alone (None).
"""

from collections.abc import Callable
import re
import threading

from absl import logging

from ctl.distributed import cluster as cluster_lib

# A task in TensorFlow's device names: /job:worker/replica:0/task:1.
_TASK = re.compile(r"/job:(chief|master|worker)(?:/replica:\d+)?/task:(\d+)")
_UNHEALTHY = "tasks are unhealthy (stopped sending heartbeats):"
_REMOTE = re.compile(r"remote target " + _TASK.pattern)
# What a broken connection to an unnamed peer says.
_CONNECTION = re.compile(
  r"Socket closed|Connection reset by peer|failed to connect to all addresses"
  r"|Connection refused|No route to host"
)
# A lost node's replacement came back before the loss was noticed.
_RESTARTED = re.compile(_TASK.pattern + r" unexpectedly tried to connect")
_LOST_SERVICE = "CoordinationService/Heartbeat"
# What another worker told the cluster it lost (`tell_the_others`).
_TOLD = re.compile(r"ctl: (lost contact with worker \d+ \([^()\s]*\)"
                   r"(?:, worker \d+ \([^()\s]*\))*)")  # fmt: skip
# How long a leaving worker tries to tell the others: one cut off from the
# coordination service cannot, and leaves anyway.
_TELL_SECS = 2.0
# The OpError classes a lost peer comes as (by name: no TensorFlow import).
_NETWORK_ERRORS = ("UnavailableError", "DeadlineExceededError", "AbortedError")


def describe(error: BaseException, info: cluster_lib.ClusterInfo) -> str | None:
  """The sentence for a peer lost behind `error`, or None if it is not one.

  Args:
    error: What a train loop (a collective) raised.
    info: This process's place in the cluster (names and addresses).

  Returns:
    "lost contact with worker 1 (host-1:23500)", or "lost contact with
    worker 0 (host-0:23500), which runs the coordination service", or
    "... (host-1:23500), which restarted"; None
    for an error that is not a lost peer, or on one worker.
  """
  if not info.is_multi_worker or type(error).__name__ not in _NETWORK_ERRORS:
    return None
  text = str(error)
  told = _TOLD.search(text)
  if told and info.rank not in map(int, re.findall(r"worker (\d+)", told[1])):
    return told[1]
  lost = _lost_tasks(text, info)
  if lost:
    restarted = ", which restarted" if _RESTARTED.search(text) else ""
    return (
      "lost contact with " + ", ".join(_name(r, info) for r in lost) + restarted
    )
  if _LOST_SERVICE in text:
    return (
      f"lost contact with {_name(0, info)}, which runs the coordination service"
    )
  if _UNHEALTHY in text:
    return "lost contact with a peer (its heartbeats stopped)"
  if _CONNECTION.search(text):
    return f"lost contact with a peer ({_CONNECTION.search(text).group(0)})"
  return None


def tell_the_others(
  sentence: str,
  error: BaseException,
  *,
  report: Callable[[int, str], None] | None = None,
) -> None:
  """Tells the other workers whom this one lost (`describe`'s `sentence` of
  `error`), through TensorFlow's coordination service, before it leaves:
  their collectives end at once with it, and they name that peer, not this
  worker the service then finds stopped. Nothing when `error` is itself
  what another worker told, or the service is what was lost. Given
  `_TELL_SECS` on a thread: a worker cut off from the service cannot tell
  it.

  Args:
    sentence: "lost contact with worker 1 (host-1:23500)".
    error: What the train loop raised.
    report: Sends (error code, message) to the cluster; None: TensorFlow's
      `report_error_to_cluster`, as its failure handler does.
  """
  if _TOLD.search(str(error)) or "coordination service" in sentence:
    return
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  if report is None:
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import

    report = context.context().report_error_to_cluster

  def tell() -> None:
    try:
      report(tf.errors.UNAVAILABLE, f"ctl: {sentence}.")
    except Exception as e:  # pylint: disable=broad-except
      # Told or not, this worker leaves; the others find the loss by the
      # service's heartbeats instead.
      logging.info("Could not tell the other workers: %s", e)

  thread = threading.Thread(target=tell, name="tell-the-others", daemon=True)
  thread.start()
  thread.join(_TELL_SECS)


def _lost_tasks(text: str, info: cluster_lib.ClusterInfo) -> list[int]:
  """The ranks the error says were lost: those the coordination service
  lists as unhealthy, else the innermost "remote target" of a relayed
  error (the peer that saw the loss first), never this task."""
  if _UNHEALTHY in text:
    listed = text.split(_UNHEALTHY, 1)[1].split("The tasks have", 1)[0]
    tasks = _TASK.findall(listed)
  elif _RESTARTED.search(text):
    tasks = _RESTARTED.findall(text)
  else:
    tasks = _REMOTE.findall(text)[-1:]
  ranks = {_rank(job, int(i), info) for job, i in tasks}
  return sorted(r for r in ranks if r is not None and r != info.rank)


def _rank(job: str, index: int, info: cluster_lib.ClusterInfo) -> int | None:
  """The rank (chief 0, then the workers) of TensorFlow's task name."""
  if job in ("chief", "master"):
    return 0 if info.chief else None
  rank = index + len(info.chief)
  return rank if rank < info.num_workers else None


def _name(rank: int, info: cluster_lib.ClusterInfo) -> str:
  """ "worker 1 (host-1:23500)": a rank as logs say it, with its address."""
  addresses = (*info.chief, *info.workers)
  return f"worker {rank} ({addresses[rank]})"
