"""Shared test fixtures, and the helpers tests import from here.

The helpers live where benchmarks can import them too: the trainer's command
line and environment in `trainer/testing.py`, the Cloud Storage emulator and
readers of a run's files in `ctl/testing/`. Tests import them from this module
(`from tests.conftest import run_trainer, ...`) or from their homes.
"""

import contextlib
import glob
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from ctl import processes
from ctl import teardown
from ctl.checkpoint.tiers import node_tiers
from ctl.distributed.ports import free_ports
from ctl.resilience import lease
from ctl.telemetry import ledger_reader
from ctl.testing import gcs_emulator as gcs_emulator_lib
from ctl.testing.run_files import read_scalars
from ctl.testing.run_files import read_summary
from trainer.testing import FAST_FLAGS
from trainer.testing import REPO
from trainer.testing import run_command
from trainer.testing import run_trainer
from trainer.testing import share_few_cores
from trainer.testing import trained_model_dir
from trainer.testing import trainer_command
from trainer.testing import trainer_env

# What tests import from here (the fixtures below come by name).
__all__ = [
  "FAST_FLAGS",
  "REPO",
  "free_ports",
  "launch_two_workers",
  "read_scalars",
  "read_summary",
  "run_trainer",
  "trainer_command",
  "trainer_env",
  "trained_model_dir",
  "wait_for_attempt",
]


# The two tiers (docs/development.md, "Tests: two tiers"): `make test` runs every test;
# `make test-fast` (CTL_TEST_TIER=fast) only those not marked `processes`,
# and there starting any process fails, so a test that needs one says so.
FAST_TIER = os.environ.get("CTL_TEST_TIER") == "fast"


def pytest_configure(config):
  share_few_cores()  # The suite runs 4-10 TensorFlow processes on 2 cores.
  # pytest's processes (the four workers hold TensorFlow and what hundreds of
  # tests left) end without the final collections: 1.4 CPU-s less each
  # after a bare collection, at the very end of the run.
  teardown.skip_final_collections()
  config.addinivalue_line(
    "markers",
    "processes: starts a process (a trainer, a launcher, an emulator, a "
    "script); left out of the fast tier (`make test-fast`)",
  )
  config.addinivalue_line(
    "markers",
    "browser: drives headless Chromium; run once, by `make browser-check` "
    "(which installs the browser), and left out of `make test`",
  )


# The modules that take longest in `make test`, longest first (each
# module's wall time, 2026-12-07), handed out first: pytest-xdist hands the
# modules out in the order collected (the Makefile's --no-loadscope-reorder).
# Many of their tests wait (on stalls, emulators, peers) while the other
# workers use the cores; one handed out last runs alone while the cores sit
# idle (test_stalls, by pytest-xdist's own order: 40 s). A module that takes
# over a minute belongs here (docs/development.md, "Tests: two tiers").
_LONGEST_FIRST = (
  "test_stalls.py",
  "test_checkpoint_tiers.py",
  "test_errors.py",
  "test_lease.py",
  "test_trainer.py",
  "test_benchmarks.py",
  "test_cloud_storage_runs.py",
  "test_any_model.py",
  "test_fault_tolerance.py",
  "test_actions.py",
  "test_agent.py",
  "test_watchdog.py",
  "test_write_failures.py",
  "test_export.py",
  "test_wall_clock.py",
  "test_examples.py",
  "test_data.py",
  "test_launcher.py",
)


def pytest_collection_modifyitems(items):
  """Puts the modules of `_LONGEST_FIRST` first, in its order; the others
  keep theirs."""
  rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session", autouse=True)
def _fast_tier_starts_no_process():
  """In the fast tier, every way to start a process (subprocess) fails;
  set up where the tests run, before any other fixture (pytest-xdist's
  own workers are started before it)."""
  if FAST_TIER:
    subprocess.Popen._execute_child = _refuse_a_process  # pylint: disable=protected-access
  yield


_STARTED_BEFORE_CALL = pytest.StashKey[set]()


def _descendants() -> set:
  """This process's descendants that still run (psutil processes, which
  compare by pid and start time)."""
  try:
    return set(psutil.Process().children(recursive=True))
  except psutil.Error:
    return set()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
  """Notes the processes that run as a test's body starts."""
  item.stash[_STARTED_BEFORE_CALL] = _descendants()
  yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
  """Ends the processes a test's body started and left running, after its
  fixtures' own clean-up: a failed test's paused trainer (SIGSTOP) held its
  run's locks until the machine stopped, failing later tests on the same
  url with an error of their own."""
  del nextitem
  yield
  before = item.stash.get(_STARTED_BEFORE_CALL, None)
  if before is None:
    return
  left = _descendants() - before
  for process in left:
    with contextlib.suppress(psutil.Error):
      process.kill()
  psutil.wait_procs(left, timeout=30)


def _refuse_a_process(*args, **kwargs):
  del args, kwargs
  raise AssertionError(
    "the fast tier starts no process: mark this test (or its module) "
    "`@pytest.mark.processes`"
  )


def wait_for_attempt(model_dir, index, step, launcher, timeout=240):
  """The ledger's events of attempt `index` of the job `launcher` runs in
  `model_dir`, once that attempt has recorded `step` (the job must not end
  before)."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    attempts = ledger_reader.read(ledger_reader.ledger_dir(model_dir))
    if len(attempts) > index:
      steps = [e["step"] for e in attempts[index] if e["event"] == "phase"]
      if steps and max(steps) >= step:
        return attempts[index]
    assert launcher.poll() is None, launcher.communicate()[0][-3000:]
    time.sleep(0.02)
  raise AssertionError(f"attempt {index} never reached step {step}")


def heavy_modules_loaded_by(*modules: str) -> list[str]:
  """Which of TensorFlow and Keras importing `modules` loads, in a fresh
  interpreter ([] for a module a command line or agent imports to answer
  at once)."""
  result = subprocess.run(
    [
      sys.executable,
      "-c",
      f"import sys; import {', '.join(modules)};"
      " print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))",
    ],
    capture_output=True,
    text=True,
    check=True,
    cwd=REPO,
    env=trainer_env(),
  )
  return json.loads(result.stdout.strip().replace("'", '"'))


@contextlib.contextmanager
def absl_messages(level: int = logging.INFO):
  """The messages absl's logger emits in the block, read from that logger:
  whether they also reach pytest's caplog depends on what other tests in
  this process did to absl logging (its handler stops their propagation)."""
  messages = []
  handler = logging.Handler(level)
  handler.emit = lambda record: messages.append(record.getMessage())
  absl_logger = logging.getLogger("absl")
  previous = absl_logger.level
  absl_logger.addHandler(handler)
  absl_logger.setLevel(level)
  try:
    yield messages
  finally:
    absl_logger.removeHandler(handler)
    absl_logger.setLevel(previous)


def nice_once(pid: int, expected: int, timeout: float = 60) -> int:
  """Process `pid`'s nice value once it is `expected`, or what it is at
  `timeout`: a priority set back by another thread or process (a spare's
  reader, the agent's heartbeat poll) takes a moment to land."""
  deadline = time.monotonic() + timeout
  while (nice := psutil.Process(pid).nice()) != expected:
    if time.monotonic() > deadline:
      break
    time.sleep(0.05)
  return nice


def launch_two_workers(
  script: str, model_dir, *args: str, faults: str | None = None
) -> dict:
  """`python -m ctl.launch --num_workers=2 -- python SCRIPT
  --model_dir=MODEL_DIR ARGS` (one restart allowed when `faults` are
  injected): the chief's printed summary line, as a dict."""
  command = [
    sys.executable,
    "-m",
    "ctl.launch",
    "--num_workers=2",
    f"--max_restarts={1 if faults else 0}",
    "--",
    sys.executable,
    os.path.join(REPO, script),
    f"--model_dir={model_dir}",
    *args,
  ]
  result = run_command(command, env=trainer_env(faults=faults), timeout=420)
  (line,) = [x for x in result.stdout.splitlines() if x.endswith("}")]
  return json.loads(line.split("] ", 1)[-1])  # The launcher's prefix off.


@pytest.fixture
def model_dir(tmp_path):
  return str(tmp_path / "run")


@pytest.fixture
def gcs_emulator(tmp_path):
  """A running `GcsEmulator` with bucket `GcsEmulator.BUCKET`, stopped after.

  `STORAGE_EMULATOR_HOST` points at it for the test and any process it starts.
  """
  with gcs_emulator_lib.serve(
    data_dir=str(tmp_path / "gcs-emulator"),
    bucket=gcs_emulator_lib.GcsEmulator.BUCKET,
  ) as emulator:
    yield emulator


@pytest.fixture(params=["refusing", "silent"])
def storage_not_answering(request, monkeypatch):
  """Cloud Storage (STORAGE_EMULATOR_HOST) at a local port that refuses
  every connection, or that accepts and never replies, and
  `storage.ANSWER_SECS` at 2 s: a bucket cut off by a partition."""
  from ctl.io import storage  # pylint: disable=g-import-not-at-top

  server = socket.create_server(("127.0.0.1", 0))
  port = server.getsockname()[1]
  if request.param == "refusing":
    server.close()
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
  monkeypatch.setattr(storage, "ANSWER_SECS", 2)
  yield
  server.close()


_HOLD_LEASE = """
import socket
import sys
from ctl.resilience import lease
if sys.argv[4]:  # A holder on another host: its pid means nothing here.
  socket.gethostname = lambda: sys.argv[4]
held = lease.acquire(model_dir=sys.argv[1], job=sys.argv[2],
                     stale_secs=float(sys.argv[3]), storage_route="gcsfs")
print("held", flush=True)
sys.stdin.read()
held.release()
"""


def earlier_identity(pid: int) -> str:
  """The identity (`ctl.processes.identity`) of a process that had `pid`
  before the one that has it now (started a tick earlier, and ended): the
  kernel reused the pid."""
  where, _, started = processes.identity(pid).rpartition("/")
  return f"{where}/{int(started) - 1}"


def lease_record(model_dir) -> dict:
  """The run directory's lease record (ctl.resilience.lease), as JSON."""
  with open(os.path.join(model_dir, lease.LEASE_FILE)) as f:
    return json.load(f)


@pytest.fixture
def lease_holder():
  """`start(model_dir, job=, stale_secs=, host=)`: a process holding its lease.

  The process takes the lease on `model_dir` (ctl.resilience.lease) and holds it,
  renewing it, until its stdin is closed; the fixture kills what is left.
  `host` names another host it stands for ("": this one), where a lease is
  judged by its renewals, not by its pid.
  """
  procs = []

  def start(model_dir, *, job="", stale_secs=60.0, host=""):
    proc = subprocess.Popen(
      [
        sys.executable,
        "-c",
        _HOLD_LEASE,
        model_dir,
        job,
        str(stale_secs),
        host,
      ],
      cwd=REPO,
      env=trainer_env(),
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      text=True,
    )
    procs.append(proc)
    assert proc.stdout.readline() == "held\n"
    return proc

  yield start
  for proc in procs:
    if proc.poll() is None:
      proc.send_signal(signal.SIGCONT)
      proc.kill()
    proc.wait()
    # Closed here, not left to the collector: an open pipe found by a later
    # test's garbage collection is a ResourceWarning in that test.
    for pipe in (proc.stdin, proc.stdout):
      with contextlib.suppress(OSError):  # Its unflushed line to the dead.
        pipe.close()


# The local checkpoint tiers in RAM when the session started (not its own).
_RAM_TIERS = os.path.join(node_tiers.RAM_ROOT, f"ctl-tier-{os.getuid()}")
_TIERS_BEFORE = set(os.listdir(_RAM_TIERS) if os.path.isdir(_RAM_TIERS) else [])


def pytest_sessionfinish(session):
  """Fails a session that leaves a local checkpoint tier in RAM which the
  next start on the node could not remove (`node_tiers.remove_stale`).

  Tiers outlive their workers on purpose and tests kill launchers, so the
  session ends as the next start would begin: it removes the tiers whose
  owners are gone, and any tier it made that names no owner fails it. An
  xdist worker leaves this to the controller, which ends after them all.
  """
  if hasattr(session.config, "workerinput") or not os.path.isdir(_RAM_TIERS):
    return
  node_tiers.remove_stale(_RAM_TIERS)
  unowned = [
    name
    for name in set(os.listdir(_RAM_TIERS)) - _TIERS_BEFORE
    if not glob.glob(
      os.path.join(_RAM_TIERS, name, "worker-*", node_tiers.OWNER_FILE)
    )
  ]
  if unowned:
    print(f"\nLocal checkpoint tiers left in {_RAM_TIERS}: {sorted(unowned)}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
