"""Free ports for a local cluster's workers and an emulator.

A port the kernel may hand to an outgoing connection in the meantime is no
free port: a worker of a concurrent run connecting to its peer took one and
held it for minutes, and the next worker told to listen there could not start
its gRPC server on any of its restarts (CI, 2026-11-28).
"""

import socket

import pytest

from ctl.distributed import ports


def test_no_port_handed_out_is_one_the_kernel_gives_outgoing_connections():
  low, high = ports.ephemeral_range()
  chosen = ports.free_ports(50)
  assert len(set(chosen)) == 50
  assert not [port for port in chosen if low <= port <= high]


def test_the_ephemeral_range_is_the_kernels():
  with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    low, high = map(int, f.read().split())
  assert ports.ephemeral_range() == (low, high)


def test_a_port_something_listens_on_is_not_handed_out(tmp_path):
  candidates = ports.free_ports(4)  # Claimed: nothing else binds them.
  claims = str(tmp_path)  # Where these four are not claimed.
  listeners = [socket.socket() for _ in candidates]
  try:
    for s, port in zip(listeners, candidates):
      s.bind(("0.0.0.0", port))
      s.listen()
    with pytest.raises(OSError, match="Fewer than 1 free ports among 4"):
      ports.free_ports(1, candidates=candidates, claims=claims)
    listeners[2].close()
    assert ports.free_ports(1, candidates=candidates, claims=claims) == [
      candidates[2]
    ]
  finally:
    for s in listeners:
      s.close()


def test_two_callers_in_a_row_are_given_different_ports():
  first, second = ports.free_ports(20), ports.free_ports(20)
  assert not set(first) & set(second)


def test_without_a_place_for_claims_the_choice_is_random_alone(tmp_path):
  blocked = tmp_path / "a-file"
  blocked.write_text("")
  chosen = ports.free_ports(3, claims=str(blocked / "claims"))
  assert len(set(chosen)) == 3
