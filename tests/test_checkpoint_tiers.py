"""Multi-tier checkpoints: two node agents on loopback as two nodes.

Each "node" keeps its local checkpoint tier in its own directory (what would
be its RAM disk), the bucket is the run's checkpoint directory, and every
run ends with the weights of the run that nothing interrupted, whichever
tier its restore came from (the ledger's `checkpoint_restore` events say).
Real trainer processes, real SIGKILLs, real files cut short.
"""

import glob
import json
import os
import re
import shutil
import signal
import sys
import time

import psutil
import pytest

from ctl import env
from ctl.checkpoint.tiers import bucket_tier
from ctl.checkpoint.tiers import local_tier
from ctl.errors import USER_ERROR_EXIT_CODE
from ctl.telemetry import ledger_reader
from ctl.testing import run_files
from ctl.testing.events import wait_for_event
from tests.conftest import FAST_FLAGS
from tests.conftest import free_ports
from tests.conftest import read_summary
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from tests.test_agent import event_pids
from tests.test_agent import trainer_of
from tests.test_cloud_storage_runs import BUCKET
from tests.test_cloud_storage_runs import FLAGS as CLOUD_FLAGS
from tests.test_cloud_storage_runs import _Bucket
from tests.test_cloud_storage_runs import _data_file
from tests.test_cloud_storage_runs import _env
from tests.test_launch import _assert_all_gone
from tests.test_write_failures import small_disk  # noqa: F401 (a fixture)
from trainer.testing import finish
from trainer.testing import killed_at_exit
from trainer.testing import launch_command
from trainer.testing import run_trainer
from trainer.testing import stall_on_frozen_upload
from trainer.testing import start
from trainer.testing import train_to_summary

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

STEPS = 60
BUCKET_EVERY = 30  # The bucket holds step 30, then 60; the tiers every 5.
FLAGS = (
  *FAST_FLAGS,
  "--deterministic",
  f"--train_steps={STEPS}",
  "--steps_per_loop=5",
  "--log_every_steps=5",
  f"--checkpoint_every_steps={BUCKET_EVERY}",
  "--eval_every_steps=0",
  "--per_replica_batch_size=16",
  "--dropout=0",
)
# The first run holds 3 s at the loop after step 35, when every tier holds a
# step newer than the bucket's 30 and the bucket not yet 60: the moment the
# tests kill in (`wait_until_local_is_ahead`). Unheld, that moment lasts one
# loop (about a second), and a loaded machine's poll could miss it.
HOLD_AHEAD = f"slow@{BUCKET_EVERY + 5}:secs=3:attempt=0"


def two_nodes(model_dir, nodes, *, flags=FLAGS, agent_flags=(), faults=None):
  """Two agents, node i's tier under `nodes/node<i>`, for a `with` block.

  One job id for both and for every start, as a platform gives a job's
  nodes; whatever still runs at the block's end is SIGKILLed
  (`killed_at_exit`). `faults`: their `CTL_FAULTS` (`HOLD_AHEAD` before a
  `wait_until_local_is_ahead`).
  """
  addresses = [f"localhost:{port}" for port in free_ports(2)]
  agents = [
    start(
      [
        sys.executable,
        "-m",
        "ctl.launch",
        "--agent",
        "--restart_backoff_secs=0.5",
        *(agent_flags or ("--max_restarts=3",)),
        "--",
        *trainer_command(
          *flags,
          f"--model_dir={model_dir}",
          f"--local_checkpoints={nodes}/node{index}",
        ),
      ],
      events=f"{model_dir}.events.jsonl",
      env=trainer_env(
        faults=faults,
        CTL_JOB_ID="tiers",
        TF_CONFIG=json.dumps(
          {
            "cluster": {"worker": addresses},
            "task": {"type": "worker", "index": index},
          }
        ),
      ),
    )
    for index in (0, 1)
  ]
  return killed_at_exit(agents)


def tier(nodes, node) -> local_tier.LocalTier:
  """Node `node`'s local tier (its worker's directory in it)."""
  (directory,) = glob.glob(f"{nodes}/node{node}/ctl-tier-*/*/worker-{node}")
  return local_tier.LocalTier(directory)


def wait_until_local_is_ahead(model_dir, root, agents, nodes=(0, 1)) -> int:
  """Waits until the tiers of `nodes` hold a step newer than the bucket's
  newest (which is BUCKET_EVERY); returns the oldest of their newest.

  The run must be started with `HOLD_AHEAD`, or the moment can pass unseen;
  the bucket's state file is read as text, for the first read through
  TensorFlow imported it here, which on a loaded machine took longer than
  the run (the run ended before the first look)."""
  state = os.path.join(model_dir, "checkpoints", "checkpoint")
  while True:
    for agent in agents:
      assert agent.poll() is None, finish(agent)[1][-3000:]
    try:
      with open(state) as f:
        bucket = run_files.listed_steps(f.read())
    except FileNotFoundError:
      bucket = []
    if bucket[-1:] == [BUCKET_EVERY]:
      try:
        newest = min(tier(root, node).steps()[-1] for node in nodes)
      except (ValueError, IndexError):
        newest = 0
      if newest > BUCKET_EVERY:
        return newest
    time.sleep(0.05)


def finish_all(agents, what):
  for agent in agents:
    code, output = finish(agent)
    assert code == 0, f"{what}:\n" + output[-3000:]


def restores(model_dir) -> list[dict]:
  """The `checkpoint_restore` events of every start, in order."""
  return [
    event
    for attempt in ledger_reader.read(ledger_reader.ledger_dir(str(model_dir)))
    for event in attempt
    if event["event"] == "checkpoint_restore"
  ]


def kill_both(agents, events) -> None:
  """SIGKILLs both agents (and so their workers): the nodes are lost."""
  for agent in agents:
    agent.kill()
    finish(agent)
  _assert_all_gone(event_pids(events), timeout=10)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The summary of two agents' run that nothing interrupted, no tiers."""
  root = tmp_path_factory.mktemp("reference")
  with two_nodes(
    root / "run", root, flags=(*FLAGS, "--local_checkpoints=off")
  ) as agents:
    finish_all(agents, "the reference")
  return read_summary(root / "run")


def _assert_identical(model_dir, reference):
  summary = read_summary(model_dir)
  assert summary["final_step"] == STEPS
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]


def test_a_killed_worker_restores_the_local_step_not_the_buckets(
  reference, tmp_path
):
  model_dir, events = tmp_path / "run", f"{tmp_path / 'run'}.events.jsonl"
  with two_nodes(model_dir, tmp_path, faults=HOLD_AHEAD) as agents:
    ahead = wait_until_local_is_ahead(model_dir, tmp_path, agents)
    trainer_of(events, worker=1).send_signal(signal.SIGKILL)
    finish_all(agents, f"worker 1 killed after step {ahead}")
  (restored,) = restores(model_dir)
  assert restored["step"] >= ahead > BUCKET_EVERY, restored
  assert restored["tier"] == "local", restored
  _assert_identical(model_dir, reference)
  # The report says where the restart's restore came from.
  attempts = read_summary(model_dir)["goodput"]["attempts"]
  assert attempts[-1]["restored_from"].startswith("local tier, "), attempts


def test_every_local_tier_wiped_restores_the_buckets_step(reference, tmp_path):
  model_dir, events = tmp_path / "run", f"{tmp_path / 'run'}.events.jsonl"
  with two_nodes(model_dir, tmp_path, faults=HOLD_AHEAD) as agents:
    wait_until_local_is_ahead(model_dir, tmp_path, agents)
    kill_both(agents, events)
  for node in (0, 1):
    shutil.rmtree(tmp_path / f"node{node}")
  with two_nodes(model_dir, tmp_path) as agents:
    finish_all(agents, "after the tiers were wiped")
  (restored,) = restores(model_dir)
  assert (restored["step"], restored["tiers"]) == (
    BUCKET_EVERY,
    ["bucket", "bucket"],
  )
  _assert_identical(model_dir, reference)


def _cut_short(prefix: str) -> None:
  (data,) = glob.glob(prefix + ".data-*")
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)


def test_a_newest_local_step_cut_short_everywhere_is_skipped(
  reference, tmp_path
):
  model_dir, events = tmp_path / "run", f"{tmp_path / 'run'}.events.jsonl"
  with two_nodes(model_dir, tmp_path, faults=HOLD_AHEAD) as agents:
    wait_until_local_is_ahead(model_dir, tmp_path, agents)
    kill_both(agents, events)
  tiers = [tier(tmp_path, node) for node in (0, 1)]
  # The two kills land apart, so one node may hold a step more than the
  # other ([30, 35] beside [35, 40]): every step newer than the newest one
  # both hold whole (the next newest, when both hold the newest) is cut.
  newest = max(t.steps()[-1] for t in tiers)
  both = sorted(set(tiers[0].steps()) & set(tiers[1].steps()))
  complete = both[-2] if both[-1] == newest else both[-1]
  for t in tiers:
    for step in t.steps():
      if step > complete:
        _cut_short(t.prefix(step))
  with two_nodes(model_dir, tmp_path) as agents:
    finish_all(agents, f"step {newest} cut short")
  (restored,) = restores(model_dir)
  assert restored["step"] == complete and restored["tier"] == "local"
  _assert_identical(model_dir, reference)


def test_a_replaced_node_gets_the_step_from_its_peer(reference, tmp_path):
  model_dir, events = tmp_path / "run", f"{tmp_path / 'run'}.events.jsonl"
  with two_nodes(model_dir, tmp_path, faults=HOLD_AHEAD) as agents:
    wait_until_local_is_ahead(model_dir, tmp_path, agents)
    kill_both(agents, events)
  newest = tier(tmp_path, 0).steps()[-1]
  shutil.rmtree(tmp_path / "node1")  # Node 1 replaced: an empty RAM disk.
  with two_nodes(model_dir, tmp_path) as agents:
    finish_all(agents, "node 1 replaced")
  (restored,) = restores(model_dir)
  assert restored["step"] == newest > BUCKET_EVERY
  assert restored["tiers"] == ["local", "peer"], restored
  _assert_identical(model_dir, reference)


def _accept_queue(port: int) -> int:
  """Connections waiting to be accepted by the socket listening on `port`
  (Linux: the rx_queue of a LISTEN socket in /proc/net/tcp is its backlog)."""
  waiting = 0
  for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(table) as f:
      for line in f.readlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
          waiting += int(queues.split(":")[1], 16)
  return waiting


def test_a_frozen_peer_is_asked_once_and_the_restore_falls_back(
  reference, tmp_path
):
  """Node 1 replaced while node 0's agent, which serves node 0's tier, is
  frozen (SIGSTOP; its worker runs on). Worker 1 used to wait 60 s for each
  step node 0 listed from that peer, then take the bucket's step; now the
  frozen service is asked once (one connection waits in its queue), the
  restore falls back to the bucket's step, and the run ends identical."""
  model_dir, events = tmp_path / "run", f"{tmp_path / 'run'}.events.jsonl"
  with two_nodes(model_dir, tmp_path, faults=HOLD_AHEAD) as agents:
    wait_until_local_is_ahead(model_dir, tmp_path, agents)
    kill_both(agents, events)
  shutil.rmtree(tmp_path / "node1")
  before = event_pids(events)

  def new(worker, *phases):
    return lambda e: (
      e["worker"] == worker
      and e["pid"] not in before
      and (not phases or e["phase"] in phases)
    )

  with two_nodes(model_dir, tmp_path) as agents:
    worker0 = wait_for_event(events, new(0), process=agents[0])
    agents[0].send_signal(signal.SIGSTOP)
    port = int(psutil.Process(worker0["pid"]).environ()[env.TIER_PORT])
    wait_for_event(events, new(1, "first_loop"), process=agents[1])
    asked = _accept_queue(port)
    agents[0].send_signal(signal.SIGCONT)
    finish_all(agents, "a frozen peer")
  assert asked == 1
  (restored,) = restores(model_dir)
  assert restored["step"] == BUCKET_EVERY, restored
  assert restored["tiers"][1] == "bucket", restored  # Not the peer.
  _assert_identical(model_dir, reference)


def test_an_agent_persists_its_dead_workers_newer_step(reference, tmp_path):
  model_dir, events = tmp_path / "run", f"{tmp_path / 'run'}.events.jsonl"
  bucket = os.path.join(model_dir, "checkpoints")
  with two_nodes(
    model_dir, tmp_path, agent_flags=("--max_restarts=0",), faults=HOLD_AHEAD
  ) as agents:
    ahead = wait_until_local_is_ahead(model_dir, tmp_path, agents)
    trainer_of(events, worker=1).send_signal(signal.SIGKILL)
    for agent in agents:
      finish(agent)  # No restarts left: each agent persists, then exits.
  persisted = bucket_tier.newest_in_bucket(bucket)
  assert persisted >= ahead > BUCKET_EVERY
  for node in (0, 1):  # The job rescheduled onto new machines.
    shutil.rmtree(tmp_path / f"node{node}")
  with two_nodes(model_dir, tmp_path) as agents:
    finish_all(agents, "after the reschedule")
  (restored,) = restores(model_dir)
  assert (restored["step"], restored["tier"]) == (persisted, "bucket")
  _assert_identical(model_dir, reference)


ONE_WORKER = (*FLAGS, "--per_replica_batch_size=32")


@pytest.fixture(scope="module")
def one_worker_reference(tmp_path_factory):
  """One worker's uninterrupted run, no tiers: its summary and bucket."""
  model_dir = tmp_path_factory.mktemp("one") / "run"
  run_trainer(
    *ONE_WORKER, "--local_checkpoints=off", f"--model_dir={model_dir}"
  )
  return read_summary(model_dir), os.path.join(model_dir, "checkpoints")


def test_one_worker_under_the_launcher_restores_its_local_step(
  one_worker_reference, tmp_path
):
  model_dir, events = tmp_path / "run", f"{tmp_path / 'run'}.events.jsonl"
  tmp = tmp_path / "tmp"
  tmp.mkdir()
  launcher = start(
    launch_command(
      "--num_workers=1",
      "--max_restarts=1",
      "--restart_backoff_secs=0.5",
      trainer_flags=(
        *ONE_WORKER,
        f"--model_dir={model_dir}",
        f"--local_checkpoints={tmp_path}/node0",
      ),
    ),
    events=events,
    env=trainer_env(faults=HOLD_AHEAD, TMPDIR=str(tmp)),
  )
  try:
    ahead = wait_until_local_is_ahead(
      model_dir, tmp_path, [launcher], nodes=(0,)
    )
    trainer_of(events, worker=0).send_signal(signal.SIGKILL)
    finish_all([launcher], f"killed after step {ahead}")
  finally:
    if launcher.poll() is None:
      launcher.kill()
  (restored,) = restores(model_dir)
  assert restored["step"] >= ahead > BUCKET_EVERY
  assert restored["tiers"] == ["local"]
  _assert_identical(model_dir, one_worker_reference[0])
  # The killed worker's local saves left no file of TensorFlow's AutoGraph
  # in its temporary directory (only a normal exit would have removed it).
  assert [n for n in os.listdir(tmp) if "autograph" in n] == []


def test_a_local_checkpoint_of_another_input_shape_is_refused(tmp_path):
  """As the bucket's (tests/test_errors.py): a run killed after its local
  saves, restarted with another --image_size, restores the local step and
  is refused in one sentence (exit 2), its checkpoints left as they were."""
  flags, kept = _killed_after_local_saves(tmp_path, job="shape")
  newest = kept.steps()[-1]
  result = run_trainer(
    *flags,
    "--image_size=24",
    env=trainer_env(CTL_JOB_ID="shape"),
    check=False,
  )
  assert result.returncode == USER_ERROR_EXIT_CODE, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]  # The bucket's sentence.
  assert last.startswith(
    f"error: The checkpoint {kept.prefix(newest)} was trained on "
  ), last
  shapes = last.replace(" ", "")
  assert "16,16,3" in shapes and "24,24,3" in shapes, last
  assert last.endswith("or another --checkpoint_dir or --model_dir."), last
  assert kept.steps()[-1] == newest


def test_a_deleted_run_directory_starts_over_though_the_tier_is_there(
  one_worker_reference, tmp_path
):
  """The tier belongs to one run: a run killed after its local saves, its
  --model_dir deleted, then started again by the same job, starts at step 0
  (one line says why the tier is not used) and ends as the uninterrupted
  run; the other run's local steps are removed, not restored."""
  model_dir = tmp_path / "run"
  flags, ghost = _killed_after_local_saves(tmp_path, job="ghost")
  shutil.rmtree(model_dir)
  again = run_trainer(
    *flags, env=trainer_env(CTL_JOB_ID="ghost"), events=f"{model_dir}.jsonl"
  )
  said = [line for line in again.stderr.splitlines() if "another run" in line]
  assert len(said) == 1, again.stderr[-3000:]
  assert restores(model_dir) == []
  assert "starting at step 0" in again.stderr
  _assert_identical(model_dir, one_worker_reference[0])


def test_a_full_local_tier_turns_off_with_one_warning(
  one_worker_reference,
  small_disk,  # noqa: F811 (the fixture imported above)
  tmp_path,
):
  summary, bucket = one_worker_reference
  checkpoint = sum(
    os.path.getsize(os.path.join(bucket, name))
    for name in os.listdir(bucket)
    if name.startswith(f"ckpt-{STEPS}.")
  )
  full = small_disk(checkpoint * 5 // 2)  # Two saves fit, not three.
  result = run_trainer(
    *ONE_WORKER,
    f"--model_dir={tmp_path / 'run'}",
    f"--local_checkpoints={full}",
  )
  warnings = [
    line for line in result.stderr.splitlines() if "cannot be written" in line
  ]
  assert len(warnings) == 1 and "turned off" in warnings[0], warnings
  _assert_identical(tmp_path / "run", summary)
  # The tier's saves stop with it: the bucket keeps its own cadence (they
  # wrote a bucket checkpoint every loop, past the lease's fence).
  in_bucket = glob.glob(str(tmp_path / "run" / "checkpoints" / "ckpt-*.index"))
  steps = sorted(int(re.search(r"ckpt-(\d+)", p).group(1)) for p in in_bucket)
  assert all(s % BUCKET_EVERY == 0 for s in steps), steps


def test_a_tier_too_small_for_one_checkpoint_turns_off_losing_nothing(
  one_worker_reference,
  small_disk,  # noqa: F811 (the fixture imported above)
  tmp_path,
):
  """Every write to the tier fails in the background, the first (step 0,
  due for the bucket) included: no step is committed without its files, the
  bucket gets every checkpoint of its cadence, and the run ends as the
  uninterrupted one, exit 0, with one warning and no traceback."""
  summary, bucket = one_worker_reference
  checkpoint = sum(
    os.path.getsize(os.path.join(bucket, name))
    for name in os.listdir(bucket)
    if name.startswith(f"ckpt-{STEPS}.")
  )
  full = small_disk(checkpoint // 2)
  result = run_trainer(
    *ONE_WORKER,
    "--max_nan_recoveries=1",  # A save of step 0, due for the bucket.
    f"--model_dir={tmp_path / 'run'}",
    f"--local_checkpoints={full}",
    check=False,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  warnings = [
    line for line in result.stderr.splitlines() if "cannot be written" in line
  ]
  assert len(warnings) == 1 and "turned off" in warnings[0], warnings
  for state in glob.glob(f"{full}/ctl-tier-*/*/worker-0/tier_state.json"):
    with open(state) as f:
      assert all(entry["files"] for entry in json.load(f)["steps"]), state
  _assert_identical(tmp_path / "run", summary)
  in_bucket = glob.glob(str(tmp_path / "run" / "checkpoints" / "ckpt-*.index"))
  steps = sorted(int(re.search(r"ckpt-(\d+)", p).group(1)) for p in in_bucket)
  assert steps == [0, BUCKET_EVERY, STEPS], steps  # Step 0 too.


def test_a_copy_to_the_bucket_that_never_completes_is_a_stall(
  gcs_emulator, tmp_path
):
  """The server freezes (SIGSTOP) as ckpt-20's copy arrives: the step does
  not wait for it, the next wait for it (a later save, the end) is a stall
  (exit 75), and the run again ends as the uninterrupted one. A run with no
  job id keeps a tier only when told where (`disk`: its TMPDIR)."""
  reference = train_to_summary(*CLOUD_FLAGS, model_dir=str(tmp_path / "local"))
  gcs_emulator.restart(freeze_on_upload=_data_file(20))
  flags = (
    *CLOUD_FLAGS,
    "--local_checkpoints=disk",
    "--storage=gcsfs",
    f"--model_dir=gs://{BUCKET}/run",
    "--stall_timeout_secs=10",
  )
  output = stall_on_frozen_upload(
    trainer_command(*flags),
    gcs_emulator,
    events=str(tmp_path / "first.jsonl"),
    env=_env(tmp_path, "first"),
  )
  assert "stall: worker 0 made no progress" in output
  run_trainer(*flags, env=_env(tmp_path, "second"))
  bucket = _Bucket.emulated(gcs_emulator)
  summary = read_summary(bucket.download("run", str(tmp_path / "downloaded")))
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]


def _killed_after_local_saves(tmp_path, *, job: str):
  """One worker of job `job` in `tmp_path / "run"`, SIGKILLed at step 40,
  after local saves newer than the bucket's; returns its flags and tier."""
  flags = (
    *ONE_WORKER,
    f"--model_dir={tmp_path / 'run'}",
    f"--local_checkpoints={tmp_path}/node0",
  )
  killed = run_trainer(
    *flags, env=trainer_env(CTL_JOB_ID=job, faults="crash@40"), check=False
  )
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
  kept = tier(tmp_path, 0)
  assert kept.steps()[-1] > BUCKET_EVERY
  return flags, kept
