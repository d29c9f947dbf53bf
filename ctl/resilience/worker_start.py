"""A script's worker start (`ctl.environment`): the environment, the peers,
the run lease's watch, then the strategy.

`ctl.distributed.environment` reads what the platform says this process is;
this adds what a start needs to be safe across a partition, which sits a
layer above it (docs/design.md, Layers): a restarted chief whose run
directory's lease names its own job watches that lease from before it waits
for its peers until its cluster forms, and ends with the lease-lost exit
code if a live chief of its job renews it (it was replaced; the job went on
without it). TensorFlow holds the GIL while a cluster forms and waits for a
missing worker, so the watch is awaited right before the strategy is built
(`lease.await_watch`). The reference trainer takes the same steps, with its
start-up check before TensorFlow loads (trainer.checks, trainer.job).
"""

from collections.abc import Mapping
import os

from ctl.distributed import environment as environment_lib
from ctl.distributed import peers
from ctl.io import outputs
from ctl.resilience import lease


def environment(
  *,
  strategy: str = "auto",
  collective: str = "auto",
  startup_timeout_secs: float = peers.STARTUP_TIMEOUT_SECS,
  environ: Mapping[str, str] = os.environ,
  **dirs: str | None,
) -> environment_lib.Environment:
  """Reads the environment, waits for the peers, builds the strategy.

  Call it first, before any TensorFlow op. The same script then runs alone
  on a laptop, under `ctl-launch --num_workers=N`, on Vertex AI and on GKE.
  A chief of a job (a job id: CTL_JOB_ID, Vertex AI's CLOUD_ML_JOB_ID)
  whose run directory's lease names that job watches it until `ctl.run`
  takes it (`lease.watch_own_job`, with the default storage route and FUSE
  root; it refuses nothing, `ctl.run` judges the lease).

  Args:
    strategy: "auto" (multi-worker in a cluster, else every local GPU, else
      one device) or a name of ctl.distributed.strategies.STRATEGY_NAMES.
    collective: the all-reduce: "auto", "ring" or "nccl".
    startup_timeout_secs: how long to wait for the other workers to start.
    environ: the process environment.
    **dirs: the output directories of `environment_lib.resolve` (model_dir,
      checkpoint_dir, tensorboard_dir, export_dir, job_dir), e.g.
      `model_dir="runs/x"`.

  Returns:
    The environment, its strategy built.

  Raises:
    UserError: what `resolve` and `with_strategy` raise, one sentence.
    TypeError: a keyword that is none of the above.
    ctl.Stalled: a peer did not start within `startup_timeout_secs`.
  """
  found = environment_lib.resolve(**dirs, environ=environ)
  model_dir = found.dirs.model_dir
  outputs.check_reachable(found.dirs, is_chief=found.is_chief)
  if found.is_chief and found.job_id.strip():
    lease.watch_own_job(
      lease.Terms(
        model_dir=model_dir,
        job=found.job_id,
        stale_secs=lease.DEFAULT_STALE_SECS,
      )
    )
  peers.wait_for_peers(found.cluster, timeout_secs=startup_timeout_secs)
  lease.await_watch(model_dir)  # Before the cluster forms: see above.
  return found.with_strategy(name=strategy, collective=collective)
