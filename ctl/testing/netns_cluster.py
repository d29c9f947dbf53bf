"""A cluster in a box: nodes as Linux network namespaces, for fault tests.

Each node is a network namespace with its own address in 198.18.0.0/15 (the
benchmark range, never a private or public one), its own host name resolved
in every namespace (`/etc/netns/<ns>/hosts`, which `ip netns exec` mounts
over `/etc/hosts`: TF_CONFIG names hosts, as a JobSet's DNS gives them), and
its own directory on disk (a node's local tier and temp files), deleted when
the node is lost. The nodes hang off one bridge in a "switch" namespace by
veth pairs; one more veth joins the harness's own namespace to the switch,
so the harness (the operator's machine) reaches every node, and the bucket
host (`add_bucket`) serves the GCS emulator on its own address.

Faults are what a real network does:
  `cut(host)`, `heal(host)`  the node's switch port down or up: it reaches
    no one and no one reaches it (a NIC, a switch, a firewall change);
  `cut_between(host, other)`, `heal_between`  blackhole routes in both
    namespaces: these two nodes lose each other, everyone else is untouched
    (the bucket lost by one node);
  `lose(host)`  the node's processes SIGKILLed, its namespace and directory
    deleted at once;
  `replace(host)`  a new node with the same host name and a new address
    (what GKE and Vertex AI bring back); every node's hosts file is updated
    in place, so running processes resolve the new address.

Cleanup: `close()` (the `with` block's end) SIGKILLs every process in every
namespace of the cluster and deletes the namespaces (the veths and the
bridge go with them) and their `/etc/netns` files. Processes started on a
node die with the harness (a parent-death signal); a harness that was
itself SIGKILLed leaves its namespaces behind, and the next cluster's start
removes every namespace whose harness process is gone (`remove_leftovers`).

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2; `Unavailable` says
in one sentence why a cluster cannot be made here.
"""

from collections.abc import Mapping, Sequence
import contextlib
import dataclasses
import ipaddress
import os
import shutil
import signal
import subprocess
import time

from ctl import processes
from ctl.launch import reaper

# Every namespace of a harness is named PREFIX<harness pid>-<suffix>.
PREFIX = "ctln"
_NETNS_ETC = "/etc/netns"
_NETNS_RUN = "/run/netns"
# The switch-side veth of the harness's own namespace is named HOST_LINK<pid>.
HOST_LINK = "ctlh"
_SUBNET_BITS = 24


class Unavailable(RuntimeError):
  """Network namespaces cannot be made here (one sentence says why)."""


@dataclasses.dataclass
class Node:
  """One node: a namespace, an address and a directory that die together.

  Attributes:
    host: The host name every node resolves to `address`.
    namespace: The network namespace's name.
    address: The node's IPv4 address.
    port: The switch-side veth's name (its "cable").
    directory: The node's own disk (local tiers, temp files).
    processes: What `run` started on the node.
  """

  host: str
  namespace: str
  address: str
  port: str
  directory: str
  processes: list[subprocess.Popen] = dataclasses.field(default_factory=list)


class Cluster:
  """Nodes in network namespaces on one bridge; use it as a context manager.

  Args:
    workdir: Where each node's directory is made (`<workdir>/<ns>`).
  """

  def __init__(self, *, workdir: str):
    check_available()
    remove_leftovers()
    self._workdir = workdir
    self._pid = os.getpid()
    self._names = 0
    self._subnet = _free_subnet()
    hosts = list(self._subnet.hosts())
    self._addresses = iter(hosts[:-1])
    self._host_address = str(hosts[-1])
    self.nodes: dict[str, Node] = {}
    self._lost: list[Node] = []
    self._blackholes: set[tuple[str, str]] = set()
    self._switch = self._namespace("switch")
    try:
      self._make_switch()
    except BaseException:
      self.close()
      raise

  def __enter__(self) -> "Cluster":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  @property
  def harness_address(self) -> str:
    """The harness's own address on the cluster's network."""
    return self._host_address

  def add_node(self, host: str) -> Node:
    """Makes a node called `host` with a new address, and says its name to
    every node (and itself)."""
    namespace = self._namespace(host)
    address = str(next(self._addresses))
    port = f"v{self._names}"
    directory = os.path.join(self._workdir, namespace)
    os.makedirs(directory)
    _ip("netns", "add", namespace)
    node = Node(host, namespace, address, port, directory)
    self.nodes[host] = node
    _ip(
      "-n", self._switch, "link", "add", port, "type", "veth",
      "peer", "name", "eth0", "netns", namespace,
    )  # fmt: skip
    _ip("-n", self._switch, "link", "set", port, "master", "br0", "up")
    _ip(
      "-n", namespace, "addr", "add", f"{address}/{_SUBNET_BITS}", "dev", "eth0"
    )
    _ip("-n", namespace, "link", "set", "eth0", "up")
    _ip("-n", namespace, "link", "set", "lo", "up")
    self._write_hosts()
    return node

  def run(
    self,
    host: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    **popen_kwargs,
  ) -> subprocess.Popen:
    """Starts `command` on node `host`; it dies with the harness.

    Args:
      host: The node.
      command: The program and its arguments.
      env: Its environment (this process's by default); TMPDIR is the node's
        own directory.
      **popen_kwargs: Passed to `subprocess.Popen` (stdout, cwd, ...).
    """
    node = self.nodes[host]
    tmp = os.path.join(node.directory, "tmp")
    os.makedirs(tmp, exist_ok=True)
    process = subprocess.Popen(
      ["ip", "netns", "exec", node.namespace, *command],
      env={**(os.environ if env is None else env), "TMPDIR": tmp},
      preexec_fn=reaper.die_with_parent(),
      **popen_kwargs,
    )
    node.processes.append(process)
    return process

  def cut(self, host: str) -> None:
    """Takes node `host`'s switch port down: it reaches no one, no one it."""
    _ip("-n", self._switch, "link", "set", self.nodes[host].port, "down")

  def heal(self, host: str) -> None:
    """Brings node `host`'s switch port back up."""
    _ip("-n", self._switch, "link", "set", self.nodes[host].port, "up")

  def cut_between(self, host: str, other: str) -> None:
    """Nodes `host` and `other` lose each other; the rest of the network
    stays (blackhole routes in both namespaces: packets vanish, as on a
    broken path, rather than being refused)."""
    a, b = self.nodes[host], self.nodes[other]
    _ip("-n", a.namespace, "route", "add", "blackhole", f"{b.address}/32")
    _ip("-n", b.namespace, "route", "add", "blackhole", f"{a.address}/32")
    self._blackholes.add((host, other))

  def heal_between(self, host: str, other: str) -> None:
    """Undoes `cut_between(host, other)`."""
    a, b = self.nodes[host], self.nodes[other]
    _ip("-n", a.namespace, "route", "del", "blackhole", f"{b.address}/32")
    _ip("-n", b.namespace, "route", "del", "blackhole", f"{a.address}/32")
    self._blackholes.discard((host, other))

  def lose(self, host: str) -> None:
    """Node `host` is gone: its processes SIGKILLed, its namespace (address,
    link) and its directory (its disk) deleted at once."""
    node = self.nodes.pop(host)
    _remove_namespace(node.namespace)
    for process in node.processes:
      with contextlib.suppress(OSError):
        process.kill()
      process.wait()
    shutil.rmtree(node.directory, ignore_errors=True)
    self._write_hosts()

  def isolate(self, host: str) -> Node:
    """Keeps node `host` alive but out of the cluster's names: it is
    cut (`cut`) and a later `replace` may take its host name. Returns it."""
    self.cut(host)
    node = self.nodes.pop(host)
    self._lost.append(node)
    return node

  def rejoin(self, node: Node) -> None:
    """Brings an isolated node's link back (its processes never stopped)."""
    _ip("-n", self._switch, "link", "set", node.port, "up")

  def replace(self, host: str) -> Node:
    """A new node with `host`'s name and a new address (the old one must be
    lost or isolated first)."""
    if host in self.nodes:
      raise ValueError(f"{host} is still in the cluster; lose it first.")
    return self.add_node(host)

  def address(self, host: str) -> str:
    """Node `host`'s address now."""
    return self.nodes[host].address

  def close(self) -> None:
    """SIGKILLs every process of the cluster and deletes every namespace."""
    for node in [*self.nodes.values(), *self._lost]:
      _remove_namespace(node.namespace)
      for process in node.processes:
        with contextlib.suppress(OSError):
          process.kill()
        process.wait()
    self.nodes.clear()
    self._lost.clear()
    _remove_namespace(self._switch)
    remove_leftovers(pid=self._pid)

  def _namespace(self, suffix: str) -> str:
    self._names += 1
    return f"{PREFIX}{self._pid}-{self._names}{suffix}"[:40]

  def _make_switch(self) -> None:
    _ip("netns", "add", self._switch)
    _ip("-n", self._switch, "link", "add", "br0", "type", "bridge")
    _ip("-n", self._switch, "link", "set", "br0", "up")
    outside = f"{HOST_LINK}{self._pid}"
    _ip(
      "-n", self._switch, "link", "add", "uplink", "type", "veth",
      "peer", "name", outside, "netns", str(self._pid),
    )  # fmt: skip
    _ip("-n", self._switch, "link", "set", "uplink", "master", "br0", "up")
    _ip("addr", "add", f"{self._host_address}/{_SUBNET_BITS}", "dev", outside)
    _ip("link", "set", outside, "up")

  def _write_hosts(self) -> None:
    """Writes every node's hosts file in place (the same inode, so a
    running process's bind mount sees the new addresses)."""
    lines = ["127.0.0.1 localhost"]
    lines += [f"{n.address} {n.host}" for n in self.nodes.values()]
    text = "\n".join(lines) + "\n"
    for node in self.nodes.values():
      directory = os.path.join(_NETNS_ETC, node.namespace)
      os.makedirs(directory, exist_ok=True)
      with open(os.path.join(directory, "hosts"), "a+", encoding="ascii") as f:
        f.seek(0)
        f.truncate()
        f.write(text)


def check_available() -> None:
  """Raises `Unavailable` where namespaces cannot be made (not root, no
  iproute2)."""
  if shutil.which("ip") is None:
    raise Unavailable(
      "A cluster of network namespaces needs iproute2's `ip` command, "
      "which is not installed here (apt-get install iproute2)."
    )
  if os.geteuid() != 0:
    raise Unavailable(
      "A cluster of network namespaces needs root (CAP_SYS_ADMIN and "
      "CAP_NET_ADMIN); run it as root, as CI does."
    )
  probe = f"{PREFIX}{os.getpid()}-probe"
  result = subprocess.run(
    ["ip", "netns", "add", probe], capture_output=True, text=True, check=False
  )
  if result.returncode:
    raise Unavailable(
      "Network namespaces cannot be made here (`ip netns add` said: "
      f"{result.stderr.strip() or result.returncode})."
    )
  _remove_namespace(probe)


def remove_leftovers(*, pid: int | None = None) -> list[str]:
  """Removes the namespaces of harnesses that are gone (or of `pid`'s).

  A harness killed by SIGKILL cannot clean up: its namespaces, the
  processes in them and their /etc/netns files are removed here, at the
  next cluster's start. Returns the names removed.
  """
  removed = []
  for link in _host_links():
    owner = int(link[len(HOST_LINK) :])
    if owner == pid or (pid is None and not processes.pid_alive(owner)):
      subprocess.run(
        ["ip", "link", "delete", link], capture_output=True, check=False
      )
  for name in namespaces():
    owner = _owner_pid(name)
    if owner is None or (
      owner != pid and (pid is not None or processes.pid_alive(owner))
    ):
      continue
    _remove_namespace(name)
    removed.append(name)
  return removed


def namespaces() -> list[str]:
  """The names of every harness namespace on this machine."""
  with contextlib.suppress(FileNotFoundError):
    return sorted(n for n in os.listdir(_NETNS_RUN) if n.startswith(PREFIX))
  return []


def _host_links() -> list[str]:
  """The harness-side veths of this namespace (HOST_LINK<pid>)."""
  names = os.listdir("/sys/class/net")
  return [
    n
    for n in names
    if n.startswith(HOST_LINK) and n[len(HOST_LINK) :].isdigit()
  ]


def _owner_pid(name: str) -> int | None:
  digits = name[len(PREFIX) :].split("-", 1)[0]
  return int(digits) if digits.isdigit() else None


def _remove_namespace(name: str) -> None:
  """SIGKILLs every process in namespace `name`, then deletes it and its
  /etc/netns files; a namespace already gone is no error."""
  for _ in range(50):
    pids = subprocess.run(
      ["ip", "netns", "pids", name], capture_output=True, text=True, check=False
    ).stdout.split()
    if not pids:
      break
    for pid in pids:
      with contextlib.suppress(ProcessLookupError):
        os.kill(int(pid), signal.SIGKILL)
    time.sleep(0.05)
  subprocess.run(
    ["ip", "netns", "delete", name], capture_output=True, check=False
  )
  shutil.rmtree(os.path.join(_NETNS_ETC, name), ignore_errors=True)


def _free_subnet() -> ipaddress.IPv4Network:
  """A /24 of 198.18.0.0/15 that no address of this namespace is in."""
  used = subprocess.run(
    ["ip", "-o", "-4", "addr", "show"],
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  addresses = [
    ipaddress.ip_address(word.split("/")[0])
    for word in used.split()
    if word.count(".") == 3 and "/" in word
  ]
  start = os.getpid() % 512
  for k in range(512):
    index = (start + k) % 512
    subnet = ipaddress.ip_network(f"198.{18 + index // 256}.{index % 256}.0/24")
    if not any(address in subnet for address in addresses):
      return subnet
  raise Unavailable("No /24 of 198.18.0.0/15 is free in this namespace.")


def _ip(*args: str) -> None:
  result = subprocess.run(
    ["ip", *args], capture_output=True, text=True, check=False
  )
  if result.returncode:
    raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
