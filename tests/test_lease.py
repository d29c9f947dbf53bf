"""ctl.resilience.lease against real holder processes, real files and the GCS emulator."""

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from ctl import errors
from ctl import processes
from ctl.resilience import lease
from ctl.resilience import lease_store
from ctl.testing.events import wait_for_event
from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import absl_messages
from tests.conftest import earlier_identity
from tests.conftest import lease_record
from tests.conftest import read_summary
from tests.conftest import run_trainer
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from trainer.testing import finish
from trainer.testing import start
from trainer.testing import train_to_summary


def _take(model_dir, **kwargs):
  return lease.acquire(
    model_dir=model_dir,
    job=kwargs.pop("job", ""),
    stale_secs=kwargs.pop("stale_secs", 60.0),
    storage_route="gcsfs",
    **kwargs,
  )


@pytest.mark.processes
def test_a_live_holder_refuses_a_second_writer_naming_itself(
  lease_holder, tmp_path
):
  proc = lease_holder(str(tmp_path))
  with pytest.raises(lease.LeaseHeld) as refused:
    _take(str(tmp_path))
  message = str(refused.value)
  assert f"pid {proc.pid} on " in message
  assert "--take_over_lease" in message
  assert lease_record(tmp_path)["pid"] == proc.pid


def test_release_removes_the_lease_and_a_new_writer_takes_it(tmp_path):
  first = _take(str(tmp_path))
  assert lease_record(tmp_path)["pid"] == os.getpid()
  first.release()
  first.release()  # Idempotent: every exit path may call it.
  assert not (tmp_path / lease.LEASE_FILE).exists()
  with _take(str(tmp_path)) as second:
    assert second.holder.pid == os.getpid()


def test_a_fresh_directory_made_for_the_lease_is_removed_with_it(tmp_path):
  fresh = tmp_path / "fresh"
  _take(str(fresh)).release()
  assert not fresh.exists()


@pytest.mark.processes
def test_a_sigkilled_holder_on_this_host_is_reclaimed_at_once(
  lease_holder, tmp_path
):
  proc = lease_holder(str(tmp_path), stale_secs=3600)
  proc.kill()
  proc.wait()
  with _take(str(tmp_path), stale_secs=3600) as taken:
    assert lease_record(tmp_path)["pid"] == os.getpid() == taken.holder.pid


@pytest.mark.processes
def test_a_restart_of_the_same_job_takes_its_own_lease(lease_holder, tmp_path):
  lease_holder(str(tmp_path), job="job-7", stale_secs=3600)  # Alive, not stale.
  with pytest.raises(lease.LeaseHeld):  # Another job is refused.
    _take(str(tmp_path), job="job-8", stale_secs=3600)
  with _take(str(tmp_path), job="job-7", stale_secs=3600):
    assert lease_record(tmp_path)["pid"] == os.getpid()


# A chief of job "j" starting as the trainer does: the start-up check
# (`check_free`, before TensorFlow loads), the wait before the cluster forms
# (`await_watch`), then either a block standing in for TensorFlow's cluster
# formation, which holds the GIL as it does ("form": a C call through
# ctypes.PyDLL, which keeps the GIL), or, a few seconds on, the take-over
# `ctl.run` makes once its cluster formed, held a few seconds more ("take").
_CHIEF_STARTING = """
import ctypes
import sys
import time
from ctl.resilience import lease
model_dir, then = sys.argv[1:]
terms = lease.Terms(model_dir=model_dir, job="j", stale_secs=60.0,
                    storage_route="gcsfs")
lease.check_free(terms)
lease.await_watch(model_dir)
if then == "form":
  ctypes.PyDLL(None).sleep(30)
else:
  time.sleep(6)
  with lease.hold(terms) as held:
    print("took generation", held.holder.generation, flush=True)
    time.sleep(6)
"""


def _chief_starting(model_dir, then):
  return subprocess.run(
    [sys.executable, "-c", _CHIEF_STARTING, model_dir, then],
    cwd=REPO,
    env=trainer_env(),
    capture_output=True,
    text=True,
    timeout=300,
  )


@pytest.mark.processes
def test_a_chief_whose_job_goes_on_under_a_live_holder_stops_with_77(
  lease_holder, tmp_path
):
  """Issue 55: a chief replaced behind a partition (a new chief of the same
  job holds the lease and renews it) passed the start-up check as "this job,
  restarted", then waited in TensorFlow's cluster formation until its
  start-up limit ended it (75, or 137). The holder's renewal tells it,
  before the cluster forms: TensorFlow holds the GIL while it waits for a
  missing worker, and no thread of the process runs then. At the default
  staleness (120 s), as a platform's chief runs."""
  holder = lease_holder(
    str(tmp_path), job="j", stale_secs=120.0, host="elsewhere"
  )
  old = _chief_starting(str(tmp_path), "form")
  assert old.returncode == errors.LEASE_LOST_EXIT_CODE, old.stderr[-3000:]
  last = old.stderr.strip().splitlines()[-1]
  assert last.startswith("error: This trainer (pid "), last
  assert f"pid {holder.pid} on elsewhere, job j" in last, last
  assert "was replaced" in last, last
  assert lease_record(tmp_path)["pid"] == holder.pid  # It wrote nothing.


def test_a_start_that_cannot_read_the_lease_asks_again_then_says_so(
  storage_not_answering, monkeypatch
):
  """A restart behind a partition checks the lease of its run on a bucket it
  cannot reach: it rode gcsfs's retries for 48 s, then aiohttp's traceback
  ended it, exit 1, before the partition healed (the cluster check's stale
  chief in the fresh-clone CI of 2026-12-07). It asks again, each time for
  at most `storage.ANSWER_SECS`, until `_READ_SECS`, then says so."""
  monkeypatch.setattr(lease, "_READ_SECS", 3)
  terms = lease.Terms(
    model_dir="gs://test-bucket/run",
    job="j",
    stale_secs=60.0,
    storage_route="gcsfs",
  )
  with pytest.raises(errors.Stalled) as stalled:
    lease.check_free(terms)
  sentence = str(stalled.value)
  assert sentence.startswith(
    "Could not read the lease on gs://test-bucket/run: its storage did not "
    "answer for 3 s ("
  ), sentence
  assert sentence.endswith("); this start writes nothing."), sentence
  assert errors.exit_code(stalled.value) == errors.STALL_EXIT_CODE


@pytest.mark.processes
def test_a_dead_holder_of_the_job_is_taken_over_at_once_and_unwatched(
  lease_holder, tmp_path
):
  """A restart's predecessor, killed, never renews: the start-up check's
  watch never fires, and the take-over comes at once, the record still
  fresh (no wait for its 3600 s staleness); the take-over's own change of
  the record is no sign of another chief."""
  dead = lease_holder(str(tmp_path), job="j", stale_secs=3600)
  dead.kill()
  dead.wait()
  generation = lease_record(tmp_path)["generation"]
  new = _chief_starting(str(tmp_path), "take")
  assert new.returncode == 0, new.stderr[-3000:]
  assert f"took generation {generation + 1}" in new.stdout
  assert "it belongs to this job (j), restarted" in new.stderr
  assert not (tmp_path / lease.LEASE_FILE).exists()  # Released at the end.


@pytest.mark.processes
def test_a_stale_lease_is_taken_over_and_its_old_holder_keeps_off(
  lease_holder, tmp_path
):
  proc = lease_holder(str(tmp_path), stale_secs=1.0, host="elsewhere")
  proc.send_signal(signal.SIGSTOP)  # Alive, but renews no more.
  time.sleep(2.0)
  taken = _take(str(tmp_path), stale_secs=1.0)
  mine = lease_record(tmp_path)
  assert mine["pid"] == os.getpid()
  proc.send_signal(signal.SIGCONT)  # Its renewal finds the lease lost.
  proc.communicate("", timeout=60)  # And its release leaves ours.
  assert proc.returncode == 0
  assert lease_record(tmp_path)["pid"] == os.getpid()
  taken.release()


@pytest.mark.processes
def test_a_paused_holder_on_this_host_is_never_stale(lease_holder, tmp_path):
  proc = lease_holder(str(tmp_path), stale_secs=1.0)
  proc.send_signal(signal.SIGSTOP)  # Alive: it may go on and commit.
  time.sleep(2.0)  # Past its staleness.
  with pytest.raises(lease.LeaseHeld, match="alive on this host"):
    _take(str(tmp_path), stale_secs=1.0)
  assert lease_record(tmp_path)["pid"] == proc.pid


@pytest.mark.processes
def test_a_holder_is_judged_by_its_own_staleness_not_the_takers(
  lease_holder, tmp_path
):
  proc = lease_holder(str(tmp_path), stale_secs=60.0, host="elsewhere")
  time.sleep(2.0)  # Renewed 15 s apart: past the taker's 1 s, not its 60.
  with pytest.raises(lease.LeaseHeld, match="stale after 60 s"):
    _take(str(tmp_path), stale_secs=1.0)
  assert lease_record(tmp_path)["pid"] == proc.pid
  assert lease_record(tmp_path)["stale_secs"] == 60.0


@pytest.mark.processes
def test_take_over_lease_takes_a_live_holders_lease(lease_holder, tmp_path):
  proc = lease_holder(str(tmp_path), stale_secs=3600)
  with _take(str(tmp_path), take_over=True):
    assert lease_record(tmp_path)["pid"] == os.getpid() != proc.pid


def _left_over(model_dir, data: bytes) -> bytes:
  """Leaves `data` as the lease file in `model_dir`, as a run left it."""
  (model_dir / lease.LEASE_FILE).write_bytes(data)
  return data


def _record_of(pid: int, job: str = "", **fields) -> bytes:
  """A lease record of `pid` on this host, renewed now."""
  now = time.time()
  record = dict(
    host=socket.gethostname(),
    pid=pid,
    job=job,
    started=now,
    renewed=now,
    generation=3,
    stale_secs=3600.0,
  )
  return json.dumps({**record, **fields}).encode()


def _watched(tmp_path, **fields) -> str:
  """Leaves a lease record of this job ("j") whose holder is on another
  host and renews every 0.1 s unless `fields` say otherwise, and passes the
  start-up check, which then watches it; returns the run directory."""
  _left_over(tmp_path, _record_of(1, job="j", host="elsewhere", **fields))
  lease.check_free(
    lease.Terms(model_dir=str(tmp_path), job="j", stale_secs=3600)
  )
  return str(tmp_path)


def test_a_watch_that_cannot_read_the_lease_confirms_nothing(tmp_path):
  """A read that fails (the bucket still cut off) tells nothing of the
  holder: the wait before the cluster forms gives up at its deadline and
  says so, rather than take the silence for a dead holder's (it did)."""
  model_dir = _watched(tmp_path, renew_secs=0.1)
  os.remove(tmp_path / lease.LEASE_FILE)
  os.mkdir(tmp_path / lease.LEASE_FILE)  # Every read of it now fails.
  try:
    with absl_messages(logging.WARNING) as messages:
      lease.await_watch(model_dir)
  finally:
    lease._stop_watch(model_dir)  # pylint: disable=protected-access
  assert any("neither seen renewing it nor confirmed" in m for m in messages)


@pytest.mark.parametrize(
  "fields", [{"renew_secs": 0.1}, {"stale_secs": 0.4}], ids=["now", "older"]
)
def test_a_dead_holders_lease_is_awaited_one_and_a_half_renewals(
  tmp_path, fields
):
  """Its record unchanged past one and a half of its holder's renewal
  periods, the wait ends with nothing said: the period as the record says
  it, or, in a record written before it was recorded, a quarter of the
  holder's staleness."""
  model_dir = _watched(tmp_path, **fields)
  try:
    with absl_messages(logging.WARNING) as messages:
      lease.await_watch(model_dir)
  finally:
    lease._stop_watch(model_dir)  # pylint: disable=protected-access
  assert not messages


def _ended_predecessors(tmp_path) -> lease.Terms:
  """Leaves a record of job "j" naming a process of this host, boot and
  namespaces that has ended (its pid now runs another, started later), and
  passes the start-up check; returns the terms it checked."""
  parent = os.getppid()
  record = _record_of(
    parent, job="j", process=earlier_identity(parent), renew_secs=0.1
  )
  _left_over(tmp_path, record)
  terms = lease.Terms(model_dir=str(tmp_path), job="j", stale_secs=3600)
  lease.check_free(terms)
  return terms


def test_a_restart_whose_predecessor_has_ended_for_certain_waits_for_nothing(
  tmp_path,
):
  """No live chief can renew that record, so the wait before the cluster
  forms (one and a half renewal periods) is not paid: the watch is spanned
  at once; the take-over records this process's own identity."""
  terms = _ended_predecessors(tmp_path)
  watching = lease._watches[terms.model_dir]  # pylint: disable=protected-access
  assert watching.spanned.is_set()  # `await_watch` returns at once.
  with _take(terms.model_dir, job="j", stale_secs=3600) as taken:
    assert taken.holder.generation == 4
    assert lease_record(tmp_path)["process"] == processes.identity(os.getpid())


def test_a_record_taken_before_that_restart_takes_it_still_ends_it(
  tmp_path, monkeypatch
):
  """Another chief of this job that takes the run while this restart loads
  TensorFlow is still seen by the watch (`_replaced` ends the process with
  77; here it only says so)."""
  replaced = threading.Event()
  monkeypatch.setattr(lease, "_replaced", lambda *args: replaced.set())
  terms = _ended_predecessors(tmp_path)
  parent = os.getppid()
  live = _record_of(
    parent, job="j", process=processes.identity(parent), generation=4
  )
  try:
    _left_over(tmp_path, live)
    assert replaced.wait(timeout=60)
  finally:
    lease._stop_watch(terms.model_dir)  # pylint: disable=protected-access


def test_a_pid_the_kernel_gave_another_process_frees_its_holders_lease(
  tmp_path,
):
  """A lease of another run whose holder's pid now runs a process started
  later (the holder ended, the kernel reused its pid) is no live holder's
  (it was "alive on this host" for good)."""
  parent = os.getppid()
  _left_over(tmp_path, _record_of(parent, process=earlier_identity(parent)))
  with _take(str(tmp_path), stale_secs=3600) as taken:
    assert taken.holder.generation == 4


def test_a_restart_whose_predecessor_may_run_watches_it(tmp_path):
  """The same record naming the process that runs now (alive: a chief of
  the same job) is watched, as one of another host is."""
  parent = os.getppid()
  _left_over(
    tmp_path,
    _record_of(parent, job="j", process=processes.identity(parent)),
  )
  lease.check_free(
    lease.Terms(model_dir=str(tmp_path), job="j", stale_secs=3600)
  )
  try:
    assert str(tmp_path) in lease._watches  # pylint: disable=protected-access
  finally:
    lease._stop_watch(str(tmp_path))  # pylint: disable=protected-access


def test_a_pid_of_another_pid_namespace_is_judged_by_renewals_not_by_pid(
  tmp_path,
):
  """Two containers on one host (one host name, a pid namespace each), or
  a node replaced under the same host name: the holder's pid says nothing
  here. Its lease, renewed now, is held, though no process of its pid runs
  on this one (it was taken over at once as a dead holder's)."""
  boot = processes.identity(os.getpid()).split("/")[0]
  left = _left_over(
    tmp_path, _record_of(2**22 + 1, process=f"{boot}/pid:[1]/12345")
  )
  with pytest.raises(lease.LeaseHeld, match="stale after 3600 s"):
    _take(str(tmp_path), stale_secs=3600)
  assert (tmp_path / lease.LEASE_FILE).read_bytes() == left


@pytest.mark.parametrize("mine", [" ", "\t", ""])
def test_a_blank_job_id_is_no_job(tmp_path, mine):
  """Issue 57: a second, separate command with CTL_JOB_ID=" " took over a
  live trainer's lease as "this job, restarted" (the first exited 77)."""
  live = os.getppid()  # Alive on this host, and not this process.
  left = _left_over(tmp_path, _record_of(live, job=" "))
  terms = lease.Terms(model_dir=str(tmp_path), job=mine, stale_secs=3600)
  with pytest.raises(lease.LeaseHeld, match="alive on this host"):
    lease.check_free(terms)
  with pytest.raises(lease.LeaseHeld, match="alive on this host"):
    _take(str(tmp_path), job=mine, stale_secs=3600)
  assert (tmp_path / lease.LEASE_FILE).read_bytes() == left


@pytest.mark.parametrize("pid", [0, -1])
def test_a_lease_of_pid_0_or_below_is_no_live_holders(tmp_path, pid):
  """os.kill(0 or -1, 0) signals process groups: such a record was "alive
  on this host" and held the run directory for good."""
  _left_over(tmp_path, _record_of(pid))
  with _take(str(tmp_path), stale_secs=3600) as taken:
    assert lease_record(tmp_path)["pid"] == os.getpid() == taken.holder.pid
    assert taken.holder.generation == 4


_DAMAGED = [
  (_record_of(999999, generation="7"), "generation is '7', not a whole number"),
  (_record_of("999999"), "pid is '999999', not a whole number"),
  (_record_of(999999, renewed=None), "renewed is None, not a number"),
  (_record_of(999999, stale_secs=True), "stale_secs is True, not a number"),
  (json.dumps({"pid": 999999}).encode(), "it has no host"),
  (b"[1, 2]", "it is not a JSON object"),
]


@pytest.mark.parametrize("data", [b'{"host": "h", "pi', b""])
def test_a_lease_left_half_written_is_taken_over_as_stale(tmp_path, data):
  """A trainer killed between creating the lease file and writing it left
  no holder: the next start (a supervised restart) takes it over."""
  _left_over(tmp_path, data)
  with _take(str(tmp_path), stale_secs=3600) as taken:
    assert lease_record(tmp_path)["pid"] == os.getpid() == taken.holder.pid
    assert taken.holder.generation == 1


@pytest.mark.parametrize("data, what", _DAMAGED)
def test_a_damaged_lease_is_one_sentence_and_taken_over_when_asked(
  tmp_path, data, what
):
  """Issue 57: a left-over record with fields of the wrong type was a
  TypeError traceback (or, unreadable, silently taken as stale)."""
  _left_over(tmp_path, data)
  path = tmp_path / lease.LEASE_FILE
  terms = lease.Terms(model_dir=str(tmp_path), job="", stale_secs=60)
  for refuse in (lambda: lease.check_free(terms), lambda: _take(str(tmp_path))):
    with pytest.raises(lease.LeaseDamaged) as refused:
      refuse()
    message = str(refused.value)
    assert message.startswith(f"The lease file {path} is damaged ({what})")
    assert "--take_over_lease" in message and message.count(". ") == 0
    assert path.read_bytes() == data
  with _take(str(tmp_path), take_over=True) as taken:
    assert lease_record(tmp_path)["pid"] == os.getpid() == taken.holder.pid
    taken.check_held("the checkpoint of step 1")  # Fenced as any holding.


@pytest.mark.processes
def test_a_damaged_lease_on_cloud_storage_is_taken_over_by_generation(
  gcs_emulator,
):
  """The take over of a damaged record is conditioned as any other: on the
  generation judged, so a record rewritten since is not overwritten."""
  url = f"gs://{gcs_emulator.BUCKET}/run"
  fs = gcs_emulator.filesystem()
  object_path = f"{gcs_emulator.BUCKET}/run/{lease.LEASE_FILE}"
  fs.pipe_file(object_path, b"[]")
  with pytest.raises(lease.LeaseDamaged, match="it is not a JSON object"):
    _take(url)
  store = lease_store.open_store(url, storage_route="gcsfs", fuse_root="/gcs")
  judged = store.read()
  fs.pipe_file(object_path, b"{}")  # Rewritten after it was judged.
  with pytest.raises(FileExistsError):
    store.take_over(b"{}", judged[1])
  with _take(url, take_over=True) as taken:
    assert json.loads(fs.cat_file(object_path))["pid"] == taken.holder.pid
    assert taken.holder.generation == 1


@pytest.mark.processes
def test_a_trainer_on_a_damaged_lease_says_so_and_takes_it_when_asked(tmp_path):
  model_dir = tmp_path / "run"
  model_dir.mkdir()
  _left_over(model_dir, _record_of("999999"))
  refused = run_trainer(*_RUN, f"--model_dir={model_dir}", check=False)
  assert refused.returncode == errors.USER_ERROR_EXIT_CODE, refused.stderr
  assert "Traceback" not in refused.stderr
  last = refused.stderr.strip().splitlines()[-1]
  assert last.startswith(f"error: The lease file {model_dir}/"), last
  run_trainer(
    *FAST_FLAGS,
    "--train_steps=10",
    "--take_over_lease",
    f"--model_dir={model_dir}",
  )
  assert read_summary(str(model_dir))["final_step"] == 10
  assert not (model_dir / lease.LEASE_FILE).exists()  # Released at the end.


def test_the_holder_renews_its_lease(tmp_path):
  with _take(str(tmp_path), stale_secs=0.4):
    first = lease_record(tmp_path)["renewed"]
    deadline = time.monotonic() + 60
    while lease_record(tmp_path)["renewed"] == first:
      assert time.monotonic() < deadline, "never renewed"
      time.sleep(0.05)


def test_a_lease_file_deleted_under_its_holder_is_said_so(tmp_path):
  held = _take(str(tmp_path))
  os.remove(tmp_path / lease.LEASE_FILE)  # By hand: no other trainer.
  with pytest.raises(errors.LeaseVanished) as vanished:
    held.check_held("the checkpoint of step 10")
  assert vanished.value.exit_code == errors.CANNOT_WRITE_EXIT_CODE
  message = str(vanished.value)
  assert f"found its lease file {lease.LEASE_FILE} gone from " in message
  assert "lost the lease" not in message
  held.release()
  assert not (tmp_path / lease.LEASE_FILE).exists()  # Nothing recreated.


def test_a_run_directory_moved_away_under_its_holder_is_said_so(tmp_path):
  run = tmp_path / "run"
  held = _take(str(run))
  run.rename(tmp_path / "moved")
  with pytest.raises(errors.LeaseVanished) as vanished:
    held.check_held("the checkpoint of step 10")
  assert vanished.value.exit_code == errors.USER_ERROR_EXIT_CODE
  assert str(vanished.value).startswith(
    f"The run directory {run} vanished (moved or deleted) while this trainer"
  )
  held.release()
  assert not run.exists()
  assert (tmp_path / "moved" / lease.LEASE_FILE).exists()  # Not its own now.


@pytest.mark.processes
def test_the_lease_on_cloud_storage_is_exclusive(lease_holder, gcs_emulator):
  url = f"gs://{gcs_emulator.BUCKET}/run"
  fs = gcs_emulator.filesystem()
  proc = lease_holder(url, stale_secs=1.0, host="elsewhere")
  object_path = f"{gcs_emulator.BUCKET}/run/{lease.LEASE_FILE}"
  assert json.loads(fs.cat_file(object_path))["pid"] == proc.pid
  with pytest.raises(lease.LeaseHeld, match=f"pid {proc.pid} on "):
    _take(url, stale_secs=3600)  # Live, however late its last renewal.
  proc.send_signal(signal.SIGSTOP)
  time.sleep(2.0)
  taken = _take(url, stale_secs=1.0)  # Stale: taken over by generation.
  assert json.loads(fs.cat_file(object_path))["pid"] == os.getpid()
  proc.send_signal(signal.SIGCONT)
  proc.communicate("", timeout=60)
  assert json.loads(fs.cat_file(object_path))["pid"] == os.getpid()
  taken.release()
  assert not fs.exists(object_path)


_RUN = (
  *FAST_FLAGS,
  "--deterministic",
  "--train_steps=60",
  "--steps_per_loop=5",
  "--log_every_steps=5",
  "--checkpoint_every_steps=10",
  "--eval_every_steps=0",
)


def _start_trainer(model_dir, log_path):
  """Starts a trainer on `model_dir`; returns it once it holds the lease."""
  with open(log_path, "w") as log:
    proc = subprocess.Popen(
      trainer_command(*_RUN, f"--model_dir={model_dir}"),
      cwd=REPO,
      env=trainer_env(),
      stdout=log,
      stderr=subprocess.STDOUT,
    )
  deadline = time.monotonic() + 300
  while not os.path.exists(os.path.join(model_dir, lease.LEASE_FILE)):
    assert proc.poll() is None, open(log_path).read()[-3000:]
    assert time.monotonic() < deadline, "the trainer never took the lease"
    time.sleep(0.05)
  return proc


@pytest.fixture(scope="module")
def single_run_fingerprint(tmp_path_factory):
  model_dir = str(tmp_path_factory.mktemp("single") / "run")
  return train_to_summary(*_RUN, model_dir=model_dir)["weights_fingerprint"]


@pytest.mark.processes
def test_two_trainers_on_one_directory_the_second_is_refused(
  single_run_fingerprint, tmp_path
):
  """Also with a shorter --lease_stale_secs than the holder's (issue 36):
  the first renews every 30 s, so its record is older than the second's 2 s,
  and it is paused; neither makes a holder alive on this host stale."""
  model_dir = str(tmp_path / "run")
  first = _paused_in_first_loop(model_dir, str(tmp_path / "first.jsonl"))
  time.sleep(3.0)  # Its record is past the second trainer's staleness.
  began = time.monotonic()
  second = run_trainer(
    *_RUN, "--lease_stale_secs=2", f"--model_dir={model_dir}", check=False
  )
  refused_in = time.monotonic() - began
  print(f"\nthe second trainer was refused in {refused_in:.2f} s")
  assert second.returncode == 2, second.stderr[-3000:]
  assert "Traceback" not in second.stderr
  last = second.stderr.strip().splitlines()[-1]
  assert last.startswith(f"error: {model_dir} is in use by another trainer")
  assert f"pid {first.pid} on " in last and "--take_over_lease" in last
  first.send_signal(signal.SIGCONT)
  code, output = finish(first)
  assert code == 0, output[-3000:]
  summary = read_summary(model_dir)
  assert summary["weights_fingerprint"] == single_run_fingerprint
  assert not os.path.exists(os.path.join(model_dir, lease.LEASE_FILE))


@pytest.mark.processes
def test_a_preempted_trainer_releases_the_lease(tmp_path):
  model_dir = str(tmp_path / "run")
  proc = _start_trainer(model_dir, tmp_path / "log")
  deadline = time.monotonic() + 300  # In the train loop: an agreed save.
  while "step 5/60" not in (tmp_path / "log").read_text():
    assert proc.poll() is None and time.monotonic() < deadline
    time.sleep(0.1)
  proc.send_signal(signal.SIGTERM)
  assert proc.wait(timeout=600) == 143, (tmp_path / "log").read_text()
  assert not os.path.exists(os.path.join(model_dir, lease.LEASE_FILE))


@pytest.mark.processes
def test_a_sigkilled_trainers_rerun_takes_the_lease_and_ends_as_one_run(
  single_run_fingerprint, tmp_path
):
  model_dir = str(tmp_path / "run")
  proc = _start_trainer(model_dir, tmp_path / "log")
  proc.kill()
  proc.wait()
  assert os.path.exists(os.path.join(model_dir, lease.LEASE_FILE))
  again = run_trainer(*_RUN, f"--model_dir={model_dir}")
  assert f"pid {proc.pid} is no longer running on this host" in again.stderr
  summary = read_summary(model_dir)
  assert summary["weights_fingerprint"] == single_run_fingerprint


# A writer that lost its lease never commits again (issue 27, item 1): the
# old holder, continued, stops with LEASE_LOST_EXIT_CODE and one sentence,
# and every file of the run directory is as the new holder left it.


def _holder_pid(model_dir):
  found = lease_store.open_store(
    model_dir, storage_route="gcsfs", fuse_root="/gcs"
  ).read()
  return found and found[0].pid


def _files(model_dir):
  """{relative path: bytes} of every file under `model_dir`."""
  found = {}
  for folder, _, names in os.walk(model_dir):
    for name in names:
      path = os.path.join(folder, name)
      with open(path, "rb") as f:
        found[os.path.relpath(path, model_dir)] = f.read()
  return found


# A trainer that names its host "elsewhere": a lease holder on another host,
# judged by its renewals, not by its pid.
_ELSEWHERE = (
  "import runpy, socket; socket.gethostname = lambda: 'elsewhere'; "
  "runpy.run_module('trainer.task', run_name='__main__', alter_sys=True)"
)


def _paused_in_first_loop(
  model_dir, events, *flags, elsewhere=False, command=None
):
  """Starts a trainer holding the lease; SIGSTOPs it as its first loop starts.

  `elsewhere`: it stands for a trainer on another host. `command`: another
  process that trains on `model_dir` (a user's ctl.run script).
  """
  command = command or trainer_command(
    *_RUN, *flags, f"--model_dir={model_dir}"
  )
  if elsewhere:
    command[1:3] = ["-c", _ELSEWHERE]
  proc = start(command, events=events)
  wait_for_event(
    events,
    lambda e: e["phase"] == "first_loop" and e["seconds"] is None,
    process=proc,
  )
  if model_dir.startswith("gs://"):  # No lock: writes are by generation.
    proc.send_signal(signal.SIGSTOP)
  else:
    _stop_outside_its_check_and_write(proc, model_dir)
  return proc


def _stop_outside_its_check_and_write(proc, model_dir):
  """SIGSTOPs `proc` while this test holds the run directory's lock.

  A renewal checks and writes the lease under an flock on the directory
  (ctl.resilience.lease); a pause that lands inside it keeps the lock, and
  every taker then waits out `_LOCK_WAIT_SECS` three times and exits 2 (CI,
  2026-11-28: "changed hands 3 times"). A trainer on another host could not
  hold this host's lock, and a paused one on this host is never stale, so
  the pause must land outside: the lock is taken first, and let go once
  every thread of `proc` is stopped.
  """
  fd = os.open(model_dir, os.O_RDONLY)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX)
    proc.send_signal(signal.SIGSTOP)
    tasks = f"/proc/{proc.pid}/task"
    while not all(_stopped(os.path.join(tasks, t)) for t in os.listdir(tasks)):
      time.sleep(0.01)
  finally:
    os.close(fd)


def _stopped(task: str) -> bool:
  """Whether the thread at /proc/<pid>/task/<tid> is stopped (or gone)."""
  try:
    with open(os.path.join(task, "stat")) as f:
      return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
  except FileNotFoundError:
    return True


def _taken_over_while_paused(model_dir, tmp_path, old):
  """A trainer with --take_over_lease takes `model_dir` from the paused
  holder `old` and is paused in turn, holding the lease, while `old` goes
  on: (the new trainer, paused; `old`'s exit code; its last line)."""
  new = start(
    trainer_command(*_RUN, "--take_over_lease", f"--model_dir={model_dir}"),
    events=str(tmp_path / "new.jsonl"),
  )
  deadline = time.monotonic() + 300
  while _holder_pid(model_dir) != new.pid:
    assert new.poll() is None and time.monotonic() < deadline
    time.sleep(0.05)
  new.send_signal(signal.SIGSTOP)
  return (new, *_stopped_for_lost_lease(old))


def _stopped_for_lost_lease(proc):
  """Continues a paused old holder; its exit code and last line.

  A lost lease is one sentence: no traceback anywhere in the output (the
  run ledger's last upload, refused by the same fence, logged one).
  """
  proc.send_signal(signal.SIGCONT)
  code, output = finish(proc)
  assert "Traceback" not in output, output[-6000:]
  return code, output.strip().splitlines()[-1]


@pytest.mark.processes
def test_a_paused_holder_taken_over_when_stale_stops_without_writing(
  single_run_fingerprint, tmp_path
):
  model_dir = str(tmp_path / "run")
  old = _paused_in_first_loop(
    model_dir,
    str(tmp_path / "old.jsonl"),
    "--lease_stale_secs=2",
    elsewhere=True,
  )
  time.sleep(3.0)  # Past staleness: it renews no more.
  new = run_trainer(*_RUN, "--lease_stale_secs=2", f"--model_dir={model_dir}")
  assert "Taking over the lease" in new.stderr
  assert read_summary(model_dir)["weights_fingerprint"] == (
    single_run_fingerprint
  )
  left = _files(model_dir)
  code, last = _stopped_for_lost_lease(old)
  # The new holder has released it: the old one, paused, never saw it, and
  # says what it finds, which a restart (exit 74) finds finished.
  assert code == errors.CANNOT_WRITE_EXIT_CODE, last
  assert last.startswith("error: This trainer "), last
  assert f"found its lease file {lease.LEASE_FILE} gone from " in last
  assert _files(model_dir) == left  # Nothing the new holder wrote changed.


@pytest.mark.parametrize(
  "vanish, code",
  [
    ("lease_file", errors.CANNOT_WRITE_EXIT_CODE),
    ("run_directory", errors.USER_ERROR_EXIT_CODE),
  ],
)
@pytest.mark.processes
def test_a_holder_whose_lease_vanished_stops_saying_so(vanish, code, tmp_path):
  """The lease file deleted by hand, or the run directory moved away, while
  the holder is paused: it stops at its next commit, in one sentence that
  blames no trainer (was: exit 77, "lost the lease ... to another trainer,
  which has since released it"), and writes nothing more."""
  model_dir = str(tmp_path / "run")
  holder = _paused_in_first_loop(model_dir, str(tmp_path / "events.jsonl"))
  if vanish == "lease_file":
    os.remove(os.path.join(model_dir, lease.LEASE_FILE))
    run_files, expected = model_dir, "error: This trainer "
  else:
    run_files = str(tmp_path / "moved")
    os.rename(model_dir, run_files)
    expected = f"error: The run directory {model_dir} vanished"
  left = _files(run_files)
  exit_code, last = _stopped_for_lost_lease(holder)
  assert exit_code == code, last
  assert last.startswith(expected), last
  assert "another trainer" not in last
  assert _files(run_files) == left
  assert os.path.exists(model_dir) == (vanish == "lease_file")


@pytest.mark.processes
def test_a_ctl_run_script_that_lost_its_lease_exits_77_in_one_sentence(
  tmp_path,
):
  # A user's ctl.run script (examples/regression.py), taken over as the
  # trainer is below: it must end as the trainer does, 77 and the sentence,
  # which an agent does not restart (a chief replaced behind a partition,
  # tried on the cluster of namespaces, was a traceback, exit 1, restarted).
  model_dir = str(tmp_path / "run")
  script = os.path.join(REPO, "examples", "regression.py")
  old = _paused_in_first_loop(
    model_dir,
    str(tmp_path / "old.jsonl"),
    command=[sys.executable, script, f"--model_dir={model_dir}"],
  )
  _stops_with_77_naming_the_taker(model_dir, tmp_path, old)


@pytest.mark.processes
def test_a_holder_on_cloud_storage_taken_over_stops_in_one_sentence(
  gcs_emulator, tmp_path
):
  """On gs:// a run's files go through staging mirrors, whose uploads the
  fence checks: the run ledger's last upload, refused so as the process
  ends, logged a traceback before the sentence (a chief replaced behind a
  partition, tried on the cluster of namespaces)."""
  model_dir = f"gs://{gcs_emulator.BUCKET}/run"
  old = _paused_in_first_loop(model_dir, str(tmp_path / "old.jsonl"))
  _stops_with_77_naming_the_taker(model_dir, tmp_path, old)


def _stops_with_77_naming_the_taker(model_dir, tmp_path, old):
  """`old`, paused holding the lease, is taken over (a trainer with
  --take_over_lease) and let go on: it exits 77, its last line naming the
  new holder (and no traceback, `_stopped_for_lost_lease`)."""
  new, code, last = _taken_over_while_paused(model_dir, tmp_path, old)
  assert code == errors.LEASE_LOST_EXIT_CODE, last
  assert last.startswith("error: This trainer (pid "), last
  assert f"to pid {new.pid} on " in last, last
  new.kill()
  finish(new)


@pytest.mark.processes
def test_take_over_lease_stops_the_live_holder_naming_the_new_one(
  single_run_fingerprint, tmp_path
):
  model_dir = str(tmp_path / "run")
  old = _paused_in_first_loop(model_dir, str(tmp_path / "old.jsonl"))
  new, code, last = _taken_over_while_paused(model_dir, tmp_path, old)
  assert code == errors.LEASE_LOST_EXIT_CODE, last
  assert f"to pid {new.pid} on " in last, last
  new.send_signal(signal.SIGCONT)
  assert finish(new)[0] == 0
  assert read_summary(model_dir)["weights_fingerprint"] == (
    single_run_fingerprint
  )
