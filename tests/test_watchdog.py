"""ctl.resilience.watchdog in a real process: a stuck main thread ends it, and says where.

No TensorFlow here: the watchdog is fed marks by hand, so each runs in
seconds. End-to-end stalls of the trainer are in test_stalls.py.
"""

import signal
import subprocess
import sys
import time

import pytest

from ctl.resilience import watchdog
from tests.conftest import REPO

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

# The steady limit: far above the scripts' gaps between marks (0.5 s at
# most) and any pause a loaded machine adds, so only a planned stall meets it.
LIMIT_SECS = 5

PRELUDE = f"""
import sys, time
from ctl.resilience import watchdog
from ctl.telemetry import progress
dog = watchdog.Watchdog(limits=watchdog.Limits(stall_timeout_secs={LIMIT_SECS},
                                               startup_timeout_secs=60),
                        worker=3, poll_secs=0.1,
                        on_stall=lambda stall: print("recorded", stall.phase,
                                                     flush=True))
marks = progress.Progress(current_step=lambda: 40, listeners=(dog,))
dog.start()
with marks.phase(progress.FIRST_LOOP):
  pass
"""


def _run(script: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-c", PRELUDE + script],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )


def _assert_stalled(
  result, where: str, recorded: str, *, limit_after: bool = True
) -> str:
  """The process ended as a stall in `where` (the steady limit; right after
  it unless `limit_after` is False), recorded."""
  assert result.returncode == 75, result.stderr
  line = result.stderr.splitlines()[0]
  assert line.startswith("stall: worker 3 made no progress for "), line
  limit = f"(limit {LIMIT_SECS} s, --stall_timeout_secs)"
  assert f"in {where}" in line and limit in line, line
  if limit_after:
    assert f"in {where} {limit}" in line, line
  assert result.stdout == f"recorded {recorded}\n"
  return line


def test_a_stuck_phase_ends_the_process_with_the_stall_line_and_stacks():
  result = _run("""
def read_that_never_returns():
  time.sleep(600)
with marks.phase(progress.TRAIN_LOOP):
  read_that_never_returns()
""")
  _assert_stalled(result, "train_loop at step 40", "train_loop")
  assert "in read_that_never_returns" in result.stderr  # The stuck stack.


def test_beats_are_progress_and_the_stall_line_says_what_was_being_done():
  # Data listing gets the steady limit (5 s) from its first run, not the
  # start-up one (60 s); each beat restarts it and the last one is named.
  result = _run("""
with marks.phase(progress.DATA_LISTING):
  for i in range(20):
    dog.beat(f"reading /data/{i}.png")
    time.sleep(0.1)
  time.sleep(600)
""")
  _assert_stalled(
    result, "data_listing at step 40, reading /data/19.png", "data_listing"
  )


def test_a_bucket_that_stops_answering_is_named_in_the_stall_line():
  # A real gcsfs call to a server that accepts the connection and never
  # answers (a bucket lost behind a partition looks the same to the
  # client): the line names the library ctl's innermost frame called.
  result = _run("""
import os, socket
silent = socket.create_server(("127.0.0.1", 0))
os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{silent.getsockname()[1]}"
from ctl.io import mirror, storage
fs = storage._gcs_filesystem()
with marks.phase(progress.CHECKPOINT_SAVE):  # The first save's limit is
  pass                                       # the start-up one.
with marks.phase(progress.CHECKPOINT_SAVE):
  mirror.object_generation(fs, "bucket/run/run.lease")
""")
  line = _assert_stalled(
    result, "checkpoint_save at step 40", "checkpoint_save", limit_after=False
  )
  assert (
    "at step 40, waiting in gcsfs, called from ctl/io/mirror.py:" in line
  ), line
  assert "(object_generation) (limit 5 s" in line, line


def test_bookkeeping_between_loops_of_a_run_gets_the_steady_limit():
  # Inside `ctl.run` (the `run` phase encloses every other) the time between
  # two train loops is the controller's bookkeeping: a hang there (or a
  # Ctrl-Z that lands there) is a stall of the steady limit (5 s), not of
  # the start-up one (60 s) that the never-ended `run` phase would get.
  result = _run("""
with marks.phase(progress.RUN):
  for _ in range(3):
    with marks.phase(progress.TRAIN_LOOP):
      time.sleep(0.05)
  time.sleep(600)
""")
  _assert_stalled(
    result,
    "bookkeeping after train_loop at step 40",
    "bookkeeping after train_loop",
  )


def test_progress_keeps_it_quiet_and_stop_ends_the_watch():
  result = _run("""
for _ in range(30):
  with marks.phase(progress.TRAIN_LOOP):
    time.sleep(0.1)
dog.stop()
time.sleep(2)
print("done")
""")
  assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr


def test_a_call_that_holds_the_gil_meets_the_c_backstop():
  # A C call that blocks for good without releasing the GIL (as a stuck
  # collective may): a mutex locked twice, through ctypes.PyDLL, whose calls
  # keep the GIL, so the Python thread cannot run; glibc's lock goes on
  # waiting after the dump's signal. The backstop process has the stacks
  # dumped, then kills the process.
  result = _run("""
import ctypes
libc = ctypes.PyDLL(None)
mutex = ctypes.create_string_buffer(64)  # Bigger than a pthread_mutex_t.
libc.pthread_mutex_init(mutex, None)
with marks.phase(progress.TRAIN_LOOP):
  time.sleep(0.5)  # The watchdog re-arms the backstop every poll.
  libc.pthread_mutex_lock(mutex)
  libc.pthread_mutex_lock(mutex)
""")
  assert result.returncode == -signal.SIGKILL, result.stderr
  assert "stall: the stall watchdog of process " in result.stderr
  assert "could not run" in result.stderr and "in <module>" in result.stderr


def test_stopped_past_the_limit_then_continued_ends_as_a_stall():
  # Ctrl-Z (or SIGSTOP) for longer than the limit and the backstop's grace,
  # then `fg`: faulthandler's C thread woke with the watchdog thread and
  # won, exit 1 instead of the stall line and 75. The line is printed inside
  # a loop of 0.5 s, so the stop lands in train_loop, not between two loops
  # (which is bookkeeping, a stall of its own name).
  process = subprocess.Popen(
    [
      sys.executable,
      "-c",
      PRELUDE
      + """
while True:
  with marks.phase(progress.TRAIN_LOOP):
    print("training", flush=True)
    time.sleep(0.5)
""",
    ],
    cwd=REPO,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )
  try:
    assert process.stdout.readline() == "training\n"
    process.send_signal(signal.SIGSTOP)
    # Stopped past the limit and the backstop's grace: the time passing is
    # what is tested, no event can stand in for it.
    time.sleep(LIMIT_SECS + watchdog.BACKSTOP_GRACE_SECS + 3)
    process.send_signal(signal.SIGCONT)
    stdout, stderr = process.communicate(timeout=60)
  finally:
    process.kill()
  assert process.returncode == 75, stderr
  assert stderr.startswith("stall: worker 3 made no progress for "), stderr
  assert (
    f"in train_loop at step 40 (limit {LIMIT_SECS} s" in stderr.splitlines()[0]
  )
  assert "recorded train_loop" in stdout
