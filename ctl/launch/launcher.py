"""Local multi-worker launcher and supervisor: N worker processes on loopback.

  python -m ctl.launch --num_workers=2 --max_restarts=3 -- \
      python -m trainer.task --flagfile=configs/quickstart.cfg

starts the command twice, each with the TF_CONFIG of one worker of a loopback
cluster, and prefixes every output line with `[worker i] `. When a worker
fails, MultiWorkerMirroredStrategy cannot go on without it, so the launcher
stops the others at once and, if restarts are left, starts the whole cluster
again after an exponential backoff (the trainer resumes from its checkpoint;
it can read the restart number from `CTL_RESTART_COUNT`, and how the previous
start ended from `CTL_PREVIOUS_EXIT`: the failed worker's exit code, or -N
when signal N killed it, as `subprocess` reports it, plus
`CTL_PREVIOUS_EXIT_TIME`, when that was, in seconds since the epoch; the run
ledger records both). Every start gets the same `CTL_JOB_ID` (`job_id`: the
platform's, else a new one), so a restarted chief takes the run directory's
lease at once (ctl.resilience.lease). SIGINT and SIGTERM
are forwarded to every worker, and whatever has not exited after a grace
period is killed, so no worker process outlives the launcher. Not even a
launcher killed by SIGKILL: its workers get a parent-death signal, and a
reaper process kills what is left and removes its files (ctl.launch.reaper).

Stalls: a worker whose stall watchdog (ctl.resilience.watchdog) ended it is restarted
like a crash, and said to have stalled, with its phase and step; a stall that
comes back at the same place is reported as not transient. As a second line
of defence the launcher reads each worker's heartbeat file (in the directory
it passes as `CTL_HEARTBEAT_DIR`) and stops the cluster when a worker is
past its watchdog's deadline by `--heartbeat_grace_secs` (a frozen process,
or a watchdog that cannot run).

Node agent: on a multi-node platform (Vertex AI, a GKE JobSet) each node's
container runs

  python -m ctl.launch --agent --max_restarts=3 -- python -m trainer.task ...

which runs ONE worker, this node's, with the environment the platform gave it
(TF_CONFIG, CLUSTER_SPEC or CTL_JOBSET_*, untouched), passes its output
through as it is, restarts it in place on a crash or a stall (exit 75) with
the same backoff, forwards SIGTERM and SIGINT, and exits with the worker's
code when it succeeds or the restarts are spent. Every node's agent restarts
its own worker: when one worker dies, its peers fail fast (TF's coordination
service; the stall watchdog bounds the rest), their agents restart them too,
and the cluster forms again, in seconds instead of the platform's minutes of
rescheduling. A SIGKILLed agent takes its worker with it, as the launcher
does. With `--warm_spare` the agent keeps the next worker process already
started with its imports done (ctl.launch.spare), blocked until a restart hands it
the environment of that start: a restart then skips the interpreter start
and the imports (TensorFlow, the trainer), for one more idle process.

This module is the command line and its options; the work is done by
ctl.launch.supervisor (the restart loop and its backoff), ctl.launch.workers (starting,
waiting for and stopping the processes), ctl.launch.heartbeats (the deadline
check), ctl.launch.output_relay (prefixed output) and ctl.launch.reaper (no orphans).
"""

import argparse
from collections.abc import Mapping, Sequence
import dataclasses
import hashlib
import json
import os
import queue
import signal
import sys
import uuid

from ctl import errors
from ctl import teardown
from ctl.checkpoint.tiers import peer_tier
from ctl.distributed import cluster
from ctl.errors import USER_ERROR_EXIT_CODE
from ctl.errors import UserError
from ctl.launch import supervisor
from ctl.launch import workers
from ctl.platform import resolver

_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Compute Engine stops a Spot (or preemptible) VM 30 s after its preemption
# notice, on Vertex AI too. The node agent's default grace leaves its trainer
# that less a margin, in which the agent reaps it and exits itself; ctl-k8s
# passes a pod's own grace less the same margin.
PREEMPTION_NOTICE_SECS = 30
AGENT_GRACE_MARGIN_SECS = 5


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
  """What to run and how to supervise it; fields match the command-line flags.

  Attributes:
    command: The worker command line, run once per worker.
    num_workers: Number of worker processes (None with `agent`).
    agent: Run one worker, this node's, in the environment given (the node
      agent) instead of a loopback cluster of `num_workers`.
    port_base: Worker i listens on port `port_base + i`; None picks free ports
      (fresh ones on every restart).
    max_restarts: How many times the whole cluster is restarted after a worker
      exits abnormally (non-zero code or killed by a signal).
    restart_backoff_secs: Wait before the first restart; doubles every restart.
    grace_secs: How long stopped workers may take to exit before SIGKILL.
    heartbeat_grace_secs: How long past its watchdog's deadline a worker's
      heartbeat may be before the launcher treats the worker as stalled.
    warm_spare: (agent) Keep the next worker process started and warm.
  """

  command: tuple[str, ...]
  num_workers: int | None = None
  agent: bool = False
  port_base: int | None = None
  max_restarts: int = 0
  restart_backoff_secs: float = 1.0
  grace_secs: float = 10.0
  heartbeat_grace_secs: float = 30.0
  warm_spare: bool = False

  def __post_init__(self):
    if not self.command:
      raise UserError(
        "no worker command given: put it after '--', e.g."
        " ctl-launch --num_workers=2 -- python -m trainer.task."
      )
    if self.agent:
      if self.num_workers is not None or self.port_base is not None:
        raise UserError(
          "--agent runs this node's one worker with the cluster its"
          " environment describes: drop --num_workers and --port_base."
        )
      if self.warm_spare:
        workers.spare_command(self.command)  # Refuses a command it cannot warm.
    elif self.warm_spare:
      raise UserError(
        "--warm_spare keeps one spare worker for a node agent: use it with"
        " --agent."
      )
    elif self.num_workers is None:
      raise UserError(
        "give --num_workers=N (a cluster on this machine) or --agent (this"
        " node's worker of a multi-node job)."
      )
    elif self.num_workers < 1:
      raise UserError(
        f"--num_workers must be at least 1, got {self.num_workers}."
      )
    if self.port_base is not None and not (
      1024 <= self.port_base <= 65536 - self.num_workers
    ):
      raise UserError(
        f"--port_base={self.port_base} leaves no room for"
        f" {self.num_workers} ports between 1024 and 65535."
      )
    if self.max_restarts < 0:
      raise UserError(
        f"--max_restarts must be 0 or more, got {self.max_restarts}."
      )
    if (
      min(self.restart_backoff_secs, self.grace_secs, self.heartbeat_grace_secs)
      < 0
    ):
      raise UserError(
        "--restart_backoff_secs, --grace_secs and"
        " --heartbeat_grace_secs must be 0 or more."
      )


# Every option but the command is the flag of the same name.
_FLAG_FIELDS = tuple(
  field
  for field in dataclasses.fields(LaunchOptions)
  if field.name != "command"
)


def run(options: LaunchOptions) -> int:
  """Runs the workers until all succeed, one fails for good, or a signal comes.

  Must be called from the main thread: SIGINT and SIGTERM are handled (and
  forwarded to the workers) while it runs.

  Args:
    options: What to run.

  Returns:
    The exit status for the launcher: 0 when every worker exited 0; the code
    of the worker that failed last (128 + N for a worker killed by signal N);
    128 + N when the launcher itself got signal N.

  Raises:
    UserError: If the command cannot be started, a port of `port_base` is in
      use, or (agent) the cluster in the environment is malformed.
  """
  if options.port_base is not None:
    workers.check_ports_free(options.port_base, options.num_workers)
  events = queue.SimpleQueue()  # Its put() is safe in a signal handler.
  previous = {
    signum: signal.signal(signum, lambda s, _: events.put(("signal", s)))
    for signum in _FORWARDED_SIGNALS
  }
  if options.agent:
    # This node's worker: its rank names its heartbeat file.
    node = [workers.Task(rank=cluster.resolve().rank)]
    tasks = lambda: node
  else:
    tasks = lambda: workers.loopback_tasks(
      options.num_workers, options.port_base
    )
  # The node agent serves its worker's local checkpoints to peers.
  service = options.agent and peer_tier.for_agent(cluster.resolve())
  code = None
  try:
    code = supervisor.supervise(
      options.command,
      tasks,
      job_id=job_id(agent=options.agent),
      relay_output=not options.agent,
      warm_spare=options.warm_spare,
      policy=supervisor.Policy(  # Its fields are options of the same name.
        **{
          field.name: getattr(options, field.name)
          for field in dataclasses.fields(supervisor.Policy)
        }
      ),
      events=events,
      worker_env=service and service.environment(),
      after_failure=service.persist if service else lambda: None,
    )
    return code
  finally:
    if service:
      service.close(remove_tier=code == 0)
    for signum, handler in previous.items():
      signal.signal(signum, handler)


def job_id(*, agent: bool, environ: Mapping[str, str] = os.environ) -> str:
  """The id of the job every start of this launcher belongs to.

  The platform's (ctl.platform.resolver.job_id: CTL_JOB_ID, Vertex AI's) when
  it gives one. Else a node agent's is drawn from the cluster description
  (every address of the cluster): each node's agent starts on its own, and
  all of one job's must agree, because the id names the run's local tiers
  and fences an agent's persist of its dead worker's step against the
  chief's lease (ctl.resilience.lease.job_fence); no two live jobs share
  the addresses, and a job started again on the same ones is the same job
  restarted. Else (one launcher for every worker) a new one.

  Raises:
    UserError: (agent) the cluster in the environment is malformed.
  """
  found = resolver.job_id(environ)
  if found or not agent:
    return found or uuid.uuid4().hex
  info = cluster.resolve(environ=environ)
  addresses = json.dumps([info.chief, info.workers]).encode()
  return f"cluster-{hashlib.sha256(addresses).hexdigest()[:16]}"


def _parse_args(argv: Sequence[str]) -> LaunchOptions:
  args = _parser().parse_args(argv)
  command = args.command[1:] if args.command[:1] == ["--"] else args.command
  if args.grace_secs is None and args.agent:
    args.grace_secs = PREEMPTION_NOTICE_SECS - AGENT_GRACE_MARGIN_SECS
  elif args.grace_secs is None:
    args.grace_secs = LaunchOptions.grace_secs
  options = {field.name: getattr(args, field.name) for field in _FLAG_FIELDS}
  return LaunchOptions(command=tuple(command), **options)


def _parser() -> errors.ArgumentParser:
  parser = errors.ArgumentParser(
    prog="ctl-launch",
    description="Run a command as N workers of a loopback TF_CONFIG cluster,"
    " or as this node's worker of a multi-node job (--agent).",
    usage="%(prog)s (--num_workers=N | --agent) [options] -- command [args...]",
  )
  parser.add_argument(
    "--num_workers", type=int, default=None, help="Number of worker processes."
  )
  _add_agent_flags(parser)
  parser.add_argument(
    "--port_base",
    type=int,
    default=None,
    help="Worker i listens on port_base + i (default: free"
    " ports, fresh on every restart).",
  )
  parser.add_argument(
    "--max_restarts",
    type=int,
    default=0,
    help="Restarts of the cluster (with --agent: of this node's worker)"
    " after a worker fails.",
  )
  parser.add_argument(
    "--restart_backoff_secs",
    type=float,
    default=1.0,
    help="Wait before the first restart; doubles each"
    f" time, up to {supervisor.MAX_BACKOFF_SECS:g}s (never under"
    f" {supervisor.MIN_PAUSE_SECS:g}s).",
  )
  parser.add_argument(
    "--grace_secs",
    type=float,
    help="Time stopped workers get before SIGKILL (default 10; with --agent"
    f" {PREEMPTION_NOTICE_SECS - AGENT_GRACE_MARGIN_SECS}: a VM's preemption"
    " notice less a margin).",
  )
  parser.add_argument(
    "--heartbeat_grace_secs",
    type=float,
    default=30.0,
    help="A worker this long past its stall watchdog's"
    " deadline is stopped as stalled.",
  )
  parser.add_argument(
    "command", nargs=argparse.REMAINDER, help="The worker command, after '--'."
  )
  return parser


def _add_agent_flags(parser: errors.ArgumentParser) -> None:
  """The node agent's flags (see the module docstring)."""
  parser.add_argument(
    "--agent",
    action="store_true",
    help="Node agent: run one worker in this environment's cluster"
    " (TF_CONFIG, CLUSTER_SPEC or CTL_JOBSET_*) and restart it in place.",
  )
  parser.add_argument(
    "--warm_spare",
    action="store_true",
    help="With --agent: keep the next worker process started, its imports"
    " done, for a faster restart (needs a 'python -m MODULE' command).",
  )


def main(argv: Sequence[str] | None = None) -> None:
  """Entry point of `ctl-launch` and `python -m ctl.launch`; exits."""
  # An agent imports TensorFlow to persist its dead worker's step.
  teardown.skip_final_collections()
  try:
    code = run(_parse_args(sys.argv[1:] if argv is None else argv))
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    code = USER_ERROR_EXIT_CODE
  sys.exit(code)


if __name__ == "__main__":
  main()
