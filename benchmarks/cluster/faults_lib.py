"""Faults between nodes: the six a real cluster has, on a cluster in a box.

Each fault runs the quick-start model (digits, the small CNN, deterministic)
as one job of three nodes (`host-0`, the chief, `host-1`, `host-2`), each a
network namespace with its own address, host name, node agent (`ctl-launch
--agent`) and local tier, and the run directory on a fourth node, the bucket
host (the GCS emulator, reached through gcsfs). The harness
(ctl.testing.netns_cluster) plays the network and the platform: it cuts
links, loses nodes and brings replacements with the same host name and a
new address. What each fault must show, against an uninterrupted run of the
same job (`reference`):

  node_lost             host-1's namespace, processes and tier removed at
                        once; a replacement joins; the job resumes (peer
                        tier or bucket) and ends with the reference weights.
  partition_healed      host-1 cut from every node for longer than the
                        stall limit, then healed: the same weights.
  partition_permanent   host-2 cut for good: every agent gives up within
                        its bound (the start-up limit per restart) and
                        exits non-zero naming the peer; nothing committed
                        is lost: once healed, the same command ends with
                        the reference weights.
  link_flap             host-1's link down and up every few seconds for a
                        minute: the same weights.
  bucket_unreachable_from_chief
                        host-0 loses the bucket host (only) during an
                        agreed save, the others keep it: the step is saved
                        whole or not at all, the job goes on, the same
                        weights.
  stale_chief_across_partition
                        host-0 cut from everyone and replaced by a new
                        chief node (same name, new address) while the old
                        one lives on behind the partition; healed, the old
                        chief commits nothing and exits 77 (its lease
                        watch saw the new chief renew the lease); the new
                        run ends with the reference weights. The new chief
                        holds its host a few times (`HOLD_STEPS`), so the
                        job outlives the old chief's stall and restart.

Each result says when the fault was detected (the first failed run mark of
any worker after it), how many steps were lost (the ledger's goodput), and
whether the ledger names the fault (`peer_lost`: "lost contact with worker
1 (host-1:23500)"; a stall: "stalled in checkpoint_save at step 150,
waiting in gcsfs, called from ctl/resilience/lease_store.py:274 (read)").
"""

import dataclasses
import json
import os
import subprocess
import sys
import time

from ctl.errors import LEASE_LOST_EXIT_CODE
from ctl.testing import events as events_lib
from ctl.testing import gcs_emulator
from ctl.testing import netns_cluster
from ctl.testing import run_files
from trainer.testing import FAST_FLAGS
from trainer.testing import REPO
from trainer.testing import trainer_command
from trainer.testing import trainer_env

HOSTS = ("host-0", "host-1", "host-2")
BUCKET_HOST = "bucket"
BUCKET = "test-bucket"
PORT = 23500
JOB_ID = "cluster-check"
MODEL_DIR = f"gs://{BUCKET}/run"
# Limits of the quick settings: a stall is found in STALL_SECS, a missing
# peer at start-up is given STARTUP_SECS, a lease is stale after LEASE_SECS.
STALL_SECS = 20
STARTUP_SECS = 30
LEASE_SECS = 12
# What any one job may take before the harness calls it a hang.
BACKSTOP_SECS = 300
FAULT_STEP = 100
# The fewest steps a job of the matrix may take: the last fault waits for
# step FAULT_STEP + 60, and a job must go on past it to a save of the bucket
# (every 50 steps) and its end.
MIN_STEPS = FAULT_STEP + 100
# The old chief's agent's row of `exit_codes` (stale_chief_across_partition).
OLD_CHIEF = "old host-0"


def flags(train_steps: int) -> tuple[str, ...]:
  """The trainer's flags for every node of the job."""
  return (
    *FAST_FLAGS,
    "--deterministic",
    f"--train_steps={train_steps}",
    "--steps_per_loop=10",
    "--log_every_steps=50",
    "--checkpoint_every_steps=50",
    "--eval_every_steps=0",
    "--per_replica_batch_size=16",
    "--dropout=0",
    f"--stall_timeout_secs={STALL_SECS}",
    f"--startup_timeout_secs={STARTUP_SECS}",
    f"--lease_stale_secs={LEASE_SECS}",
    f"--model_dir={MODEL_DIR}",
  )


@dataclasses.dataclass
class Result:
  """One fault's row of results.json."""

  name: str
  outcome: str = "not run"
  detected_secs: float | None = None
  steps_lost: int | None = None
  same_fingerprint: bool = False
  named_in_ledger: list[str] = dataclasses.field(default_factory=list)
  exit_codes: dict[str, int | None] = dataclasses.field(default_factory=dict)
  seconds: float = 0.0
  fingerprint: str | None = None
  broken: list[str] = dataclasses.field(default_factory=list)
  passed: bool = False
  detail: str = ""


class Job:
  """One job of three nodes and a bucket host on a fresh cluster."""

  def __init__(
    self, cluster: netns_cluster.Cluster, workdir: str, *, steps: int
  ):
    self.cluster, self.workdir, self.steps = cluster, workdir, steps
    for host in (*HOSTS, BUCKET_HOST):
      cluster.add_node(host)
    self.events = os.path.join(workdir, "events.jsonl")
    self.agents: dict[str, subprocess.Popen] = {}
    self._start_bucket()

  def _start_bucket(self) -> None:
    data = os.path.join(self.workdir, "bucket-data")
    os.makedirs(data)
    log = open(os.path.join(self.workdir, "bucket.log"), "w", encoding="utf-8")
    emulator = gcs_emulator.GcsEmulator(
      data_dir=data,
      host=self.cluster.address(BUCKET_HOST),
      launch=lambda command: self.cluster.run(
        BUCKET_HOST, command, env=trainer_env(), cwd=REPO, stdout=log,
        stderr=subprocess.STDOUT,
      ),
    )  # fmt: skip
    emulator.start()
    emulator.create_bucket(BUCKET)
    self.endpoint = emulator.endpoint
    self.bucket_port = emulator.port
    # The harness reads the run's files as an operator would.
    os.environ["STORAGE_EMULATOR_HOST"] = self.endpoint

  def start_agent(
    self, host: str, *, max_restarts: int = 6, faults: str | None = None
  ) -> subprocess.Popen:
    """Starts node `host`'s agent over its worker (TF_CONFIG names hosts);
    `faults`: a `CTL_FAULTS` value for its worker alone."""
    index = HOSTS.index(host)
    node = self.cluster.nodes[host]
    config = {
      "cluster": {"worker": [f"{h}:{PORT}" for h in HOSTS]},
      "task": {"type": "worker", "index": index},
    }
    env = trainer_env(
      faults=faults,
      TF_CONFIG=json.dumps(config),
      STORAGE_EMULATOR_HOST=f"http://{BUCKET_HOST}:{self.bucket_port}",
      CTL_EVENTS=self.events,
      CTL_JOB_ID=JOB_ID,
    )
    log_path = os.path.join(self.workdir, f"{node.namespace}.log")
    log = open(log_path, "a", encoding="utf-8")
    agent = self.cluster.run(
      host,
      [sys.executable, "-m", "ctl.launch", "--agent",
       f"--max_restarts={max_restarts}", "--restart_backoff_secs=0.5", "--",
       *trainer_command(*flags(self.steps),
                        f"--local_checkpoints={node.directory}/tier")],
      env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    self.agents[host] = agent
    return agent

  def start(self, *, restarts: dict[str, int] | None = None) -> None:
    """Starts every node's agent (`restarts`: --max_restarts by host)."""
    for host in HOSTS:
      self.start_agent(
        host,
        **(
          {"max_restarts": restarts[host]} if host in (restarts or {}) else {}
        ),
      )

  def wait_for_step(self, step: int, *, worker: int = 0) -> None:
    events_lib.wait_for_step(
      self.events, step, process=self.agents[HOSTS[worker]], worker=worker,
      timeout=BACKSTOP_SECS,
    )  # fmt: skip

  def wait_for_phase(self, phase: str, *, worker: int, step: int) -> None:
    """Waits for `worker` to begin `phase` at `step` or later."""
    events_lib.wait_for_event(
      self.events,
      lambda e: (
        e["worker"] == worker and e["phase"] == phase and e["step"] >= step
      ),
      process=self.agents[HOSTS[worker]],
      timeout=BACKSTOP_SECS,
    )

  def finish(self, agents: dict[str, subprocess.Popen] | None = None) -> dict:
    """Waits for the agents (the backstop SIGKILLs a hang); their codes."""
    codes = {}
    deadline = time.monotonic() + BACKSTOP_SECS
    for host, agent in (agents or self.agents).items():
      try:
        codes[host] = agent.wait(timeout=max(1, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()
        codes[host] = None  # A hang.
    return codes

  def detected_after(self, wall: float) -> float | None:
    """Seconds from `wall` until a worker failed on the fault: its failed
    run mark (a lost peer, or a stall: the watchdog ends the run phase in
    the events file before it exits), or, for a process that left none (a
    backstop's SIGKILL), the first mark of the process that replaced it
    (an upper bound)."""
    events = events_lib.read_events(self.events)
    before = {e["pid"] for e in events if e["time"] < wall}
    times = [
      e["time"]
      for e in events
      if e["time"] >= wall
      and ((e["phase"] == "run" and e["seconds"] is not None and not e["ok"])
           or e["pid"] not in before)
    ]  # fmt: skip
    return round(min(times) - wall, 1) if times else None

  def summary(self) -> dict | None:
    fs = self.filesystem()
    try:
      return json.loads(fs.cat(f"{MODEL_DIR}/train_summary.json"))
    except FileNotFoundError:
      return None

  def faults_named(self) -> list[str]:
    """What the run's ledger says ended each attempt that a fault ended (a
    lost peer, a stall and where it waited: `goodput.named_fault`)."""
    from ctl.telemetry import goodput  # pylint: disable=g-import-not-at-top
    from ctl.telemetry import ledger_reader  # pylint: disable=g-import-not-at-top

    attempts = ledger_reader.read(ledger_reader.ledger_dir(MODEL_DIR))
    return [f for f in map(goodput.named_fault, attempts) if f]

  def filesystem(self):
    import gcsfs  # pylint: disable=g-import-not-at-top

    return gcsfs.GCSFileSystem(
      endpoint_url=self.endpoint, token="anon", skip_instance_cache=True,
      use_listings_cache=False,
    )  # fmt: skip

  def objects(self) -> dict[str, str]:
    """Every object of the bucket and its generation (what was written)."""
    fs = self.filesystem()
    return {
      path: str(info.get("generation"))
      for path, info in fs.find(BUCKET, detail=True).items()
    }

  def torn_steps(self) -> list[int]:
    """The steps the bucket's state file lists whose files are not all
    there (a checkpoint must be whole or not listed at all)."""
    fs = self.filesystem()
    torn = []
    for step in self.committed_steps():
      files = fs.glob(f"{MODEL_DIR}/checkpoints/ckpt-{step}.*")
      sizes = [fs.size(f) for f in files]
      if not any(f.endswith(".index") for f in files) or not all(sizes):
        torn.append(step)
    return torn

  def committed_steps(self) -> list[int]:
    """The checkpoint steps the bucket's state file lists."""
    try:
      text = (
        self.filesystem().cat(f"{MODEL_DIR}/checkpoints/checkpoint").decode()
      )
    except FileNotFoundError:
      return []
    return run_files.listed_steps(text)


# The faults. Each takes a started Job, does its fault, and returns
# (wall time of the fault, what it expects of the end: "same weights" or
# "bounded stop"), leaving the agents to finish.


def node_lost(job: Job) -> float:
  job.wait_for_step(FAULT_STEP)
  fault = time.time()
  job.cluster.lose("host-1")
  time.sleep(2)  # The platform notices and brings a new node.
  job.cluster.replace("host-1")
  job.start_agent("host-1")
  return fault


def partition_healed(job: Job) -> float:
  job.wait_for_step(FAULT_STEP)
  fault = time.time()
  job.cluster.cut("host-1")
  time.sleep(STALL_SECS + 10)
  job.cluster.heal("host-1")
  return fault


def link_flap(job: Job) -> float:
  job.wait_for_step(FAULT_STEP)
  fault = time.time()
  for _ in range(10):  # A minute: 3 s down, 3 s up.
    job.cluster.cut("host-1")
    time.sleep(3)
    job.cluster.heal("host-1")
    time.sleep(3)
  return fault


def bucket_unreachable_from_chief(job: Job) -> float:
  # The chief's copy of step 150 to the bucket (its agreed save).
  job.wait_for_phase("checkpoint_save", worker=0, step=FAULT_STEP + 50)
  fault = time.time()
  job.cluster.cut_between("host-0", BUCKET_HOST)
  time.sleep(STALL_SECS + 10)
  job.cluster.heal_between("host-0", BUCKET_HOST)
  return fault


def partition_permanent(job: Job) -> float:
  job.wait_for_step(FAULT_STEP)
  fault = time.time()
  job.cluster.cut("host-2")
  return fault


# The new chief holds its host this long at each of these steps (each hold
# under STALL_SECS): a job of a few seconds' training would otherwise end,
# and release the lease, before the old chief, cut off, has stalled and been
# restarted (STALL_SECS, the bucket's answer awaited, a start): its return
# would then meet a finished job, not the live chief that replaced it.
HOLD_SECS = 12
HOLD_STEPS = (FAULT_STEP + 70, FAULT_STEP + 100, FAULT_STEP + 130)


def stale_chief_across_partition(job: Job) -> float:
  job.wait_for_step(FAULT_STEP)
  fault = time.time()
  old = job.cluster.isolate("host-0")
  job.old_chief = job.agents.pop("host-0")
  time.sleep(2)  # The platform brings a new chief node.
  job.cluster.replace("host-0")
  job.start_agent(
    "host-0",
    faults=",".join(f"stall@{s}:secs={HOLD_SECS}" for s in HOLD_STEPS),
  )
  # The new chief resumes and trains; then the partition heals.
  job.wait_for_step(FAULT_STEP + 60)
  job.cluster.rejoin(old)
  return fault


FAULTS = {
  "node_lost": node_lost,
  "partition_healed": partition_healed,
  "partition_permanent": partition_permanent,
  "link_flap": link_flap,
  "bucket_unreachable_from_chief": bucket_unreachable_from_chief,
  "stale_chief_across_partition": stale_chief_across_partition,
}


def run_fault(name: str, *, workdir: str, steps: int) -> Result:
  """Runs fault `name` ("none": the uninterrupted reference) on a fresh
  cluster: what happened, to be `judge`d against the reference's weights."""
  result = Result(name)
  started = time.monotonic()
  os.makedirs(workdir)
  with netns_cluster.Cluster(workdir=workdir) as cluster:
    job = Job(cluster, workdir, steps=steps)
    permanent = name == "partition_permanent"
    stale = name == "stale_chief_across_partition"
    # A node that may be cut for good gets one restart, as a platform's
    # restart policy bounds it; the others ride out a fault.
    job.start(
      restarts={"host-2": 1, "host-1": 1, "host-0": 1}
      if permanent
      else {"host-0": 1}
      if stale
      else {}
    )
    fault = FAULTS[name](job) if name in FAULTS else None
    result.exit_codes = job.finish()
    if permanent:  # Bounded, then healed and run again by the operator.
      result.detail = _bounded_stop(job, result.exit_codes)
      job.cluster.heal("host-2")
      job.start()
      job.finish()
    if stale:  # The old chief, healed, must write nothing and end.
      before = job.objects()
      (result.exit_codes[OLD_CHIEF],) = job.finish(
        {"old": job.old_chief}
      ).values()
      written = sorted(
        p for p, g in job.objects().items() if before.get(p) != g
      )
      result.detail = (
        f"the old chief wrote {written or 'nothing'} after the heal"
      )
      if written:
        result.exit_codes[OLD_CHIEF] = None
    summary = job.summary() or {}
    result.fingerprint = summary.get("weights_fingerprint")
    result.steps_lost = summary.get("goodput", {}).get("lost_steps")
    result.named_in_ledger = sorted(set(job.faults_named()))
    torn = job.torn_steps()
    if torn:
      result.broken.append(f"the bucket lists torn checkpoints {torn}")
    if fault is not None:
      result.detected_secs = job.detected_after(fault)
    result.outcome = _outcome(name, summary)
  result.seconds = round(time.monotonic() - started, 1)
  return result


def judge(result: Result, reference: str | None) -> Result:
  """Sets whether `result` held (`passed`, and what did not in `broken`);
  `reference` is the uninterrupted run's weights fingerprint (for the
  reference run itself: its own)."""
  result.same_fingerprint = (
    result.fingerprint is not None and result.fingerprint == reference
  )
  result.passed = _passed(result.name, result)
  return result


def _bounded_stop(job: Job, codes: dict) -> str:
  return (
    f"agents exited {sorted(set(codes.values()))} within the bound; the bucket "
    f"kept steps {job.committed_steps()}"
  )


def _outcome(name: str, summary: dict) -> str:
  if not summary:
    return "no summary: the job did not finish"
  if name == "partition_permanent":
    return f"stopped within the bound, then resumed to step {summary.get('final_step')}"
  return f"finished at step {summary.get('final_step')}"


# What the ledger must name, not a generic crash or stall: the worker the
# chief lost while it ran (a `peer_lost` event), or what the chief's stuck
# save waited in (its `stall` event).
NAMED = {
  "node_lost": "host-1",
  "partition_healed": "host-1",
  "partition_permanent": "host-2",
  "bucket_unreachable_from_chief": "waiting in gcsfs",
}


def _passed(name: str, result: Result) -> bool:
  """Whether the fault held; what did not is added to `result.broken`."""
  broken = result.broken
  if not result.same_fingerprint:
    broken.append("the weights differ from the uninterrupted run's")
  hung = [host for host, code in result.exit_codes.items() if code is None]
  if hung:
    broken.append(f"{hung} did not end within {BACKSTOP_SECS} s (a hang)")
  bound = STALL_SECS + 15
  if name in FAULTS and (result.detected_secs or 0) > bound:
    broken.append(f"detected after {result.detected_secs} s (bound {bound} s)")
  if name in NAMED and not any(
    NAMED[name] in p for p in result.named_in_ledger
  ):
    broken.append(f"the ledger does not name {NAMED[name]}")
  old = result.exit_codes.get(OLD_CHIEF)  # stale_chief_across_partition's.
  if old not in (None, LEASE_LOST_EXIT_CODE):  # None: a hang, said above.
    broken.append(
      f"the old chief exited {old}, not {LEASE_LOST_EXIT_CODE} (replaced: "
      "the lease held by the new chief)"
    )
  return not broken
