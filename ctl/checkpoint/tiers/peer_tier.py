"""The peer tier: a node's local tier served to the other nodes, and
fetched from them.

A node agent (`ctl-launch --agent`) outlives the worker it restarts, so it
is where a node's local checkpoint tier (ctl.checkpoint.tiers.local_tier) is
served from: `TierService`, a small read-only HTTP service that answers
`GET /<name>` with a file of the worker's tier (its state file, or a
`ckpt-<step>.*` file, nothing else), so a peer that lacks the agreed step
fetches it (`fetch_from_peer`, `PeerTier`). The worker says where its tier
is in a pointer file whose path the agent passes it (`env.TIER_POINTER`,
ctl.checkpoint.tiers.node_tiers), with the service's port.

Like the workers' gRPC port, the service speaks plain HTTP without
authentication: it belongs on the job's private network (a VPC, the pod
network), never on an address others can reach. Tests bind it to loopback.

A peer that does not answer (its node agent frozen, its machine gone) costs
one `PEER_SILENCE_SECS`: a limit on silence, not on the whole copy, so a slow
but steady copy goes on; and it is not asked again in that restore.

When the worker dies, `TierService.persist` copies the tier's newest
complete step to the bucket if it is newer than the bucket's newest
(ctl.checkpoint.tiers.bucket_tier), so a job rescheduled onto new machines
(whose local tiers are empty) loses at most one local interval. The copy
runs on a thread and the restart does not wait for it (the agent's first
copy imports TensorFlow: 4 s on 2 busy cores, and a hung bucket would hold
the restart for as long): the restarted worker needs the local tier, not
the bucket, and copies from a hard-linked snapshot that its own pruning
cannot touch. Its first save to the bucket comes after its start-up,
tracing and a save interval; both writers commit the bucket's state file
through the one fenced commit, so neither drops the other's newer step.
The agent waits for the copy before it exits.
"""

import http.client
import http.server
import json
import os
import re
import shutil
import threading
import urllib.error
import urllib.request

from absl import logging

from ctl import env
from ctl.checkpoint.tiers import bucket_tier
from ctl.checkpoint.tiers import local_tier
from ctl.checkpoint.tiers import node_tiers
from ctl.io import tempdirs

# Seconds a peer's file service may send nothing (connecting, or mid-file)
# before it is given up: a socket timeout, each read waits this long at most.
PEER_SILENCE_SECS = 5.0
_SERVED = re.compile(
  rf"{re.escape(local_tier.STATE_FILE)}|ckpt-\d+\.(index|data-\d+-of-\d+)"
)


class PeerTier:
  """Another worker's local tier, as ctl.checkpoint.tiers.tier_restore asks a
  tier: the steps it said it holds, and `get`, which fetches one into this
  worker's own tier. A peer that did not answer is added to `silent`, the
  peers a restore does not ask again."""

  name = "peer"

  def __init__(
    self, own: local_tier.LocalTier, address: str, steps, silent: set[str]
  ):
    self._own = own
    self.address = address
    self._steps = list(steps)
    self._silent = silent

  def steps(self) -> list[int]:
    return [] if self.address in self._silent else self._steps

  def get(self, step: int) -> str | None:
    """Fetches `step` into this worker's tier; its prefix there, or None."""
    if step not in self.steps():
      return None
    fetched = fetch_from_peer(
      self._own, step, address=self.address, silent=self._silent
    )
    return self._own.prefix(step) if fetched else None


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
    pointer = node_tiers.read_pointer(self.pointer)
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
    pointer = node_tiers.read_pointer(self.pointer)
    if not pointer:
      return
    try:
      step = bucket_tier.persist_newest(pointer)
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
    pointer = node_tiers.read_pointer(self.pointer)
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


def fetch_from_peer(
  tier: local_tier.LocalTier,
  step: int,
  *,
  address: str,
  silent: set[str] | None = None,
):
  """Copies committed `step` from a peer's file service into `tier`.

  Args:
    tier: this worker's tier.
    step: the step to copy.
    address: the peer's service, "host:port".
    silent: the peers that did not answer; `address` is added to it when it
      does not answer now (silent `PEER_SILENCE_SECS`, refused, reset).

  Returns:
    Whether the step is now committed in `tier` (False: said why).
  """
  base = f"http://{address}/"
  try:
    with _open(base + local_tier.STATE_FILE) as response:
      state = json.load(response)
    (files,) = [e["files"] for e in state["steps"] if e["step"] == step]
    for name, size in files.items():
      if os.path.basename(name) != name:
        raise ValueError(f"a file name with a directory: {name!r}")
      temporary = os.path.join(tier.directory, f".fetch-{name}")
      with _open(base + name) as response, open(temporary, "wb") as f:
        shutil.copyfileobj(response, f, 1 << 20)
      if os.path.getsize(temporary) != size:
        raise ValueError(
          f"{name}: {os.path.getsize(temporary)} of {size} bytes"
        )
      os.replace(temporary, os.path.join(tier.directory, name))
  except (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    http.client.HTTPException,
  ) as e:
    if isinstance(e, urllib.error.HTTPError):
      e.close()  # It holds the answer's connection (a 404: a step gone).
    unanswered = _did_not_answer(e)
    if unanswered and silent is not None:
      silent.add(address)
    logging.warning(
      "Could not fetch the checkpoint of step %d from the peer at %s (%s)%s.",
      step,
      address,
      e,
      "; it is not asked again in this restore" if unanswered else "",
    )
    return False
  tier.adopt(step)
  return True


def _did_not_answer(error: Exception) -> bool:
  """Whether a fetch failed for want of an answer (silence, refused, reset),
  not for what the peer answered (404, a short file, a bad state file)."""
  if isinstance(error, urllib.error.HTTPError):
    return False
  if isinstance(error, urllib.error.URLError):
    error = error.reason
  return isinstance(error, (TimeoutError, ConnectionError))


def _open(url: str):
  return urllib.request.urlopen(url, timeout=PEER_SILENCE_SECS)
