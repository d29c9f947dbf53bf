"""The cluster in a box (ctl.testing.netns_cluster): real namespaces, real
links, real processes; nothing of it left behind, even after a SIGKILL.

CI runs as root, where these run; elsewhere the harness says why in one
sentence (tested below), and these tests fail rather than skip in CI.
"""

import contextlib
import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil
import pytest

from benchmarks.cluster import check as cluster_check
from ctl.io import tempdirs
from ctl.testing import netns_cluster
from trainer.testing import REPO

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

# A node answers HTTP on this port; another node asks by host name.
PORT = 8000


def _serve(cluster, host):
  process = cluster.run(
    host,
    [sys.executable, "-m", "http.server", str(PORT), "--bind", "0.0.0.0"],
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  deadline = time.monotonic() + 30
  while not _reaches(cluster, host, cluster.address(host)):
    assert process.poll() is None and time.monotonic() < deadline
    time.sleep(0.1)
  return process


def _reaches(cluster, host, target) -> bool:
  """Whether node `host` gets an HTTP answer from `target` (a host name or
  an address) within 2 s."""
  code = f"import urllib.request; urllib.request.urlopen('http://{target}:{PORT}/', timeout=2)"
  node = cluster.nodes[host]
  return (
    subprocess.run(
      ["ip", "netns", "exec", node.namespace, sys.executable, "-c", code],
      capture_output=True,
      check=False,
    ).returncode
    == 0
  )


def _harness_names():
  return netns_cluster.namespaces()


def _own_names():
  """This process's harness namespaces: another harness (a cluster check run
  beside the suite) has its own, named after its pid, and they may outlive
  this test's cluster."""
  own = f"{netns_cluster.PREFIX}{os.getpid()}-"
  return [n for n in _harness_names() if n.startswith(own)]


def test_nodes_reach_each_other_by_name_until_a_fault_cuts_them(tmp_path):
  with netns_cluster.Cluster(workdir=str(tmp_path)) as cluster:
    for host in ("a", "b", "c"):
      cluster.add_node(host)
    _serve(cluster, "b")
    assert _reaches(cluster, "a", "b")
    cluster.cut("b")  # b's switch port down: no one reaches it.
    assert not _reaches(cluster, "a", "b")
    assert not _reaches(cluster, "c", "b")
    cluster.heal("b")
    assert _reaches(cluster, "a", "b")
    cluster.cut_between("a", "b")  # Only a and b lose each other.
    assert not _reaches(cluster, "a", "b")
    assert _reaches(cluster, "c", "b")
    cluster.heal_between("a", "b")
    assert _reaches(cluster, "a", "b")


def test_a_lost_node_takes_its_processes_and_disk_and_a_replacement_gets_its_name(
  tmp_path,
):
  with netns_cluster.Cluster(workdir=str(tmp_path)) as cluster:
    cluster.add_node("a")
    old = cluster.add_node("b")
    server = _serve(cluster, "b")
    with open(os.path.join(old.directory, "tier"), "w", encoding="ascii") as f:
      f.write("checkpoint")
    cluster.lose("b")
    assert server.poll() == -signal.SIGKILL
    assert not os.path.exists(old.directory)
    assert old.namespace not in _harness_names()
    assert not _reaches(cluster, "a", "b")
    new = cluster.replace("b")
    assert new.address != old.address
    _serve(cluster, "b")
    assert _reaches(cluster, "a", "b")  # The same name, the new address.


def test_close_leaves_no_namespace_link_or_process(tmp_path):
  with netns_cluster.Cluster(workdir=str(tmp_path)) as cluster:
    cluster.add_node("a")
    server = _serve(cluster, "a")
    ours = _own_names()
  assert server.poll() == -signal.SIGKILL
  assert not set(ours) & set(_harness_names())
  assert (
    not [n for n in os.listdir("/etc/netns") if n in ours]
    if os.path.isdir("/etc/netns")
    else True
  )
  assert f"{netns_cluster.HOST_LINK}{os.getpid()}" not in os.listdir(
    "/sys/class/net"
  )


def test_a_sigkilled_harness_is_cleaned_up_by_the_next_cluster(tmp_path):
  script = textwrap.dedent(f"""
    import subprocess, sys, time
    from ctl.testing import netns_cluster
    cluster = netns_cluster.Cluster(workdir={str(tmp_path / 'first')!r})
    cluster.add_node("a")
    cluster.run("a", ["sleep", "600"])
    print("ready", flush=True)
    time.sleep(600)
  """)
  (tmp_path / "first").mkdir()
  first = subprocess.Popen(
    [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
  )
  assert first.stdout.readline() == "ready\n"
  left = [
    n
    for n in _harness_names()
    if n.startswith(f"{netns_cluster.PREFIX}{first.pid}-")
  ]
  assert len(left) == 2  # The switch and node a.
  first.kill()
  first.wait()
  # Its node's process died with it (a parent-death signal); its namespaces
  # stay until the next cluster starts.
  assert set(left) <= set(_harness_names())
  with netns_cluster.Cluster(workdir=str(tmp_path)):
    assert not set(left) & set(_harness_names())
  link = f"{netns_cluster.HOST_LINK}{first.pid}"
  assert link not in os.listdir("/sys/class/net")
  sleeping = subprocess.run(
    ["pgrep", "-f", "^sleep 600$"], capture_output=True, text=True, check=False
  )
  assert sleeping.stdout == ""


def test_where_namespaces_cannot_be_made_it_says_why_in_one_sentence():
  """As an unprivileged user (nobody), the harness refuses in one line."""
  result = subprocess.run(
    ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
     sys.executable, "-m", "benchmarks.cluster.check"],
    capture_output=True, text=True, check=False, cwd=REPO,
    env={**os.environ, "PYTHONPATH": REPO, "HOME": "/tmp"},
  )  # fmt: skip
  assert result.returncode == 2, result.stderr
  assert result.stderr.startswith(
    "error: A cluster of network namespaces needs root"
  )
  assert result.stderr.count("\n") == 1


def test_a_sigkilled_fault_matrix_leaves_nothing_after_the_next_start(
  tmp_path,
):
  """`make cluster-check` SIGKILLed mid-fault: the process running the fault
  and every process on its nodes die with it, the next cluster's start
  removes its namespaces, and the next check's start its work directory
  (each node's disk, the bucket's data, the logs)."""
  check = subprocess.Popen(
    [sys.executable, "-m", "benchmarks.cluster.check",
     "--only=partition_healed", "--parallel=1",
     f"--results_dir={tmp_path}"],
    cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
  )  # fmt: skip
  try:
    deadline = time.monotonic() + 120
    while not (agents := _node_agents(check.pid)):  # The fault is under way.
      assert check.poll() is None and time.monotonic() < deadline
      time.sleep(0.2)
    runner = agents[0].parent()  # `ip netns exec` became the agent.
    left = [
      n
      for n in _harness_names()
      if n.startswith(f"{netns_cluster.PREFIX}{runner.pid}-")
    ]
    descendants = psutil.Process(check.pid).children(recursive=True)
    work = glob.glob(
      os.path.join(
        tempfile.gettempdir(), f"{cluster_check.WORK_PREFIX}{check.pid}_*"
      )
    )
  finally:
    check.kill()  # Also when the test fails: nothing runs on after it.
    check.wait()
  assert left  # The runner's switch, nodes and bucket host.
  gone, alive = psutil.wait_procs(descendants, timeout=60)
  assert not alive, alive  # Each would run on, unsupervised.
  assert runner in gone and set(agents) <= set(gone)
  with netns_cluster.Cluster(workdir=str(tmp_path / "next")):
    assert not set(left) & set(_harness_names())
  assert len(work) == 1 and os.path.isdir(work[0]), work  # Named by its pid.
  os.rmdir(tempdirs.scratch_dir(cluster_check.WORK_PREFIX))  # A next start.
  assert not os.path.exists(work[0])


def _node_agents(pid: int) -> list[psutil.Process]:
  """The node agents (`ctl.launch --agent`) below process `pid`."""
  found = []
  for process in psutil.Process(pid).children(recursive=True):
    with contextlib.suppress(psutil.Error):
      if "--agent" in process.cmdline():
        found.append(process)
  return found
