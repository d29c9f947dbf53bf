"""ctl.checkpoint.tiers.peer_tier: a node agent's read-only checkpoint file service,
on loopback (the real HTTP server; peers fetch from it in
tests/test_checkpoint_tiers.py)."""

import os
import urllib.error
import urllib.request

import pytest

from ctl import env
from ctl.checkpoint.tiers import local_tier
from ctl.checkpoint.tiers import node_tiers
from ctl.checkpoint.tiers import peer_tier
from tests.conftest import absl_messages
from tests.conftest import heavy_modules_loaded_by
from tests.tier_checkpoints import checkpoint_of
from tests.tier_checkpoints import cut_short
from tests.tier_checkpoints import value_of


@pytest.fixture
def service(tmp_path):
  tier = tmp_path / "tier"
  tier.mkdir()
  (tier / local_tier.STATE_FILE).write_text('{"steps": []}')
  (tier / "ckpt-5.index").write_bytes(b"index bytes")
  (tier / "ckpt-5.data-00000-of-00001").write_bytes(os.urandom(3000))
  (tier / "notes.txt").write_text("not a checkpoint file")
  served = peer_tier.TierService(host="127.0.0.1")
  node_tiers.write_pointer(
    served.pointer, directory=str(tier), bucket_dir=str(tmp_path), keep=1
  )
  yield served, tier
  served.close(remove_tier=False)


def _get(served, name: str) -> bytes:
  url = f"http://127.0.0.1:{served.port}/{name}"
  with urllib.request.urlopen(url, timeout=10) as response:
    return response.read()


def test_the_worker_is_told_the_pointer_and_the_port(service):
  served, _ = service
  assert served.environment() == {
    env.TIER_POINTER: served.pointer,
    env.TIER_PORT: str(served.port),
  }


def test_it_serves_the_tiers_checkpoint_files_whole(service):
  served, tier = service
  for name in (
    local_tier.STATE_FILE,
    "ckpt-5.index",
    "ckpt-5.data-00000-of-00001",
  ):
    assert _get(served, name) == (tier / name).read_bytes()


@pytest.mark.parametrize(
  "name", ["notes.txt", "ckpt-6.index", "..%2Fpassword", "ckpt-5.index/x"]
)
def test_anything_else_is_not_found(service, name):
  served, _ = service
  with pytest.raises(urllib.error.HTTPError) as raised:
    _get(served, name)
  raised.value.close()  # The error holds the answer's connection.
  assert raised.value.code == 404


def test_closing_at_the_jobs_end_removes_the_tier(tmp_path):
  tier = tmp_path / "ctl-tier" / "run" / "worker-0"
  tier.mkdir(parents=True)
  served = peer_tier.TierService(host="127.0.0.1")
  node_tiers.write_pointer(
    served.pointer, directory=str(tier), bucket_dir=str(tmp_path), keep=1
  )
  served.close(remove_tier=True)
  assert not tier.exists() and not os.path.exists(served.pointer)


class _GoneReader:
  """A request whose peer stopped reading: every write is a broken pipe."""

  path = "/ckpt-5.index"

  def __init__(self):
    self.wfile = self
    self.sent = []

  def send_response(self, code):
    self.sent.append(code)

  def send_header(self, *header):
    del header

  def end_headers(self):
    pass

  def write(self, data):
    raise BrokenPipeError(32, "Broken pipe")


def test_a_peer_that_stopped_reading_is_one_line_not_a_traceback(service):
  """A frozen agent continued (SIGCONT) writes to a peer that gave up on
  it: a BrokenPipeError out of the handler was a traceback per request."""
  served, _ = service
  with absl_messages() as messages:
    served.answer(_GoneReader())  # Raised BrokenPipeError.
  assert messages == [
    "A peer stopped reading ckpt-5.index from this node's checkpoint "
    "service (BrokenPipeError); it fetches elsewhere."
  ]


@pytest.fixture
def bare_service():
  served = peer_tier.TierService()
  yield served
  served.close(remove_tier=True)


def test_a_peer_fetches_a_step_from_the_service(bare_service, tmp_path):
  theirs = local_tier.LocalTier(str(tmp_path / "node1"))
  node_tiers.write_pointer(
    bare_service.pointer, directory=theirs.directory, bucket_dir="", keep=2
  )
  theirs.save(checkpoint_of(20), 20)
  mine = local_tier.LocalTier(str(tmp_path / "node0"))
  address = f"127.0.0.1:{bare_service.port}"
  assert peer_tier.fetch_from_peer(mine, 20, address=address)
  assert mine.steps() == [20] and value_of(mine.prefix(20)) == 20
  assert not peer_tier.fetch_from_peer(mine, 25, address=address)
  cut_short(theirs, 20)
  assert not peer_tier.fetch_from_peer(
    local_tier.LocalTier(str(tmp_path / "node2")), 20, address=address
  )


def test_the_service_serves_nothing_outside_the_tier(bare_service, tmp_path):
  tier = local_tier.LocalTier(str(tmp_path / "tier"))
  node_tiers.write_pointer(
    bare_service.pointer, directory=tier.directory, bucket_dir="", keep=2
  )
  (tmp_path / "secret").write_text("no")
  for name in ("../secret", "%2e%2e/secret", "secret", ""):
    with pytest.raises(OSError, match="404"):
      peer_tier._open(f"http://127.0.0.1:{bare_service.port}/{name}")


@pytest.mark.processes
def test_the_launcher_and_its_tier_service_import_no_tensorflow():
  """The launcher and node agent start in a fraction of a second: TensorFlow
  loads only when an agent persists a step (a worker died)."""
  assert heavy_modules_loaded_by("ctl.launch.launcher") == []
