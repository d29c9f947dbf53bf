"""The node agent's checkpoint file service, and its persist-on-crash duty.

A node agent (`ctl-launch --agent`) outlives the worker it restarts, so it
is where a node's local checkpoint tier (ctl.checkpoint.local_tier) is served from: a
small read-only HTTP service that answers `GET /<name>` with a file of the
worker's tier (its state file, or a `ckpt-<step>.*` file, nothing else), so
a peer that lacks the agreed step fetches it (ctl.checkpoint.tier_restore). The worker
says where its tier is in a pointer file whose path the agent passes it
(`env.TIER_POINTER`), with the service's port.

Like the workers' gRPC port, the service speaks plain HTTP without
authentication: it belongs on the job's private network (a VPC, the pod
network), never on an address others can reach. Tests bind it to loopback.

When the worker dies, `persist` copies the tier's newest complete step to
the bucket if it is newer than the bucket's newest, so a job rescheduled
onto new machines (whose local tiers are empty) loses at most one local
interval. The copy runs on a thread and the restart does not wait for it
(the agent's first copy imports TensorFlow: 4 s on 2 busy cores, and a
hung bucket would hold the restart for as long): the restarted worker
needs the local tier, not the bucket, and copies from a hard-linked
snapshot (ctl.checkpoint.local_tier) that its own pruning cannot touch.
Its first save to the bucket comes after its start-up, tracing and a save
interval; both writers merge the bucket's state file by step, so neither
drops the other's newer step. The agent waits for the copy before it
exits.
"""

import http.server
import os
import re
import shutil
import threading

from absl import logging

from ctl import env
from ctl.checkpoint import local_tier
from ctl.io import tempdirs

_SERVED = re.compile(
  rf"{re.escape(local_tier.STATE_FILE)}|ckpt-\d+\.(index|data-\d+-of-\d+)"
)


class TierService:
  """Serves one worker's local tier to its peers (module docstring)."""

  def __init__(self, *, host: str = "127.0.0.1", port: int = 0):
    """Starts serving on (`host`, `port`; 0 picks a free port).

    Args:
      host: the address to listen on: the node's private address.
      port: the port, or 0.
    """
    self._directory = tempdirs.scratch_dir("ctl_tier_agent_")
    self.pointer = os.path.join(self._directory, "tier.json")
    service = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_GET(self):  # pylint: disable=invalid-name
        service.answer(self)

      def log_message(self, *args):  # One line per file would flood.
        del args

    self._server = http.server.ThreadingHTTPServer((host, port), Handler)
    self._server.daemon_threads = True
    self.port = self._server.server_address[1]
    self._thread = threading.Thread(
      target=self._server.serve_forever, name="tier-service", daemon=True
    )
    self._thread.start()
    self._persisting: threading.Thread | None = None

  def environment(self) -> dict[str, str]:
    """What the worker is told: the pointer file and the service's port."""
    return {
      env.TIER_POINTER: self.pointer,
      env.TIER_PORT: str(self.port),
    }

  def answer(self, request: http.server.BaseHTTPRequestHandler) -> None:
    """Sends the named file of the tier, or 404 for anything else."""
    name = request.path.lstrip("/")
    pointer = local_tier.read_pointer(self.pointer)
    path = pointer and os.path.join(pointer["directory"], name)
    try:
      if not _SERVED.fullmatch(name) or not path:
        raise FileNotFoundError(name)
      with open(path, "rb") as f:
        request.send_response(200)
        request.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
        request.end_headers()
        shutil.copyfileobj(f, request.wfile, 1 << 20)
    except FileNotFoundError:
      request.send_error(404)
    except ConnectionError as e:  # The peer gave up (it timed out, it died).
      logging.warning(
        "A peer stopped reading %s from this node's checkpoint service "
        "(%s); it fetches elsewhere.",
        name,
        type(e).__name__,
      )

  def persist(self) -> None:
    """Starts copying the tier's newest step to the bucket, if it is newer
    there, on a thread (module docstring); one copy at a time."""
    self._wait_for_persist()
    self._persisting = threading.Thread(
      target=self._persist, name="tier-persist"
    )
    self._persisting.start()

  def _wait_for_persist(self) -> None:
    if self._persisting is not None:
      self._persisting.join()
      self._persisting = None

  def _persist(self) -> None:
    """Copies the tier's newest step to the bucket if it is newer there;
    never raises (a failed copy is a warning: the agent goes on)."""
    pointer = local_tier.read_pointer(self.pointer)
    if not pointer:
      return
    try:
      step = local_tier.persist_newest(pointer)
    except Exception as e:  # pylint: disable=broad-except
      logging.warning("Could not persist the local checkpoint: %s", e)
      return
    if step is not None:
      logging.warning(
        "The worker died: its local checkpoint of step %d was copied to %s.",
        step,
        pointer["bucket_dir"],
      )

  def close(self, *, remove_tier: bool) -> None:
    """Waits for a copy to the bucket, stops serving; with `remove_tier`
    (the run is over) removes the tier."""
    self._wait_for_persist()
    self._server.shutdown()
    self._server.server_close()
    pointer = local_tier.read_pointer(self.pointer)
    if remove_tier and pointer:
      local_tier.LocalTier(pointer["directory"]).remove()
    shutil.rmtree(self._directory, ignore_errors=True)


def for_agent(info) -> TierService | None:
  """The service of a node agent whose worker is `info` (ctl.distributed.cluster's
  ClusterInfo), on the host of the worker's own address; None (said why)
  when it cannot listen there."""
  addresses = (*info.chief, *info.workers)
  host = addresses[info.rank].rsplit(":", 1)[0] if addresses else "localhost"
  try:
    return TierService(host=host)
  except OSError as e:
    logging.warning(
      "No checkpoint file service on %s (%s): peers cannot fetch this "
      "node's local checkpoints.",
      host,
      e,
    )
    return None
