"""What the platform says this process is: one call for a multi-worker run.

A worker learns its place from the environment its platform gives it: plain
TF_CONFIG (ctl-launch, the TensorFlow tutorial), Vertex AI's CLUSTER_SPEC and
AIP_* output directories, or a GKE JobSet's CTL_JOBSET_* variables; the
launcher's CTL_* variables add the job id and the restart count. This module
reads them all, through the readers that own each variable
(ctl.distributed.cluster, ctl.io.outputs, ctl.env), into one `Environment`,
and is the one path both the reference trainer and a `ctl.run` user take:

  env = ctl.environment(model_dir="runs/x")
  ctl.run(
    task=...,
    options=ctl.RunOptions(**env.option_values(), train_steps=1000),
    strategy=env.strategy,
  )

`resolve` reads it without TensorFlow, for checks that must answer before
it loads (trainer.checks); `Environment.with_strategy` builds the strategy.
`ctl.environment` (ctl.resilience.worker_start) is both, with the wait for
the other workers and the run lease's watch between them, before TensorFlow
runs any op (MultiWorkerMirroredStrategy requires it).
`check_chief` refuses an `is_chief` given by hand that the strategy's
cluster contradicts.
"""

from collections.abc import Mapping
import dataclasses
import os
from typing import TYPE_CHECKING, Any

from absl import logging

from ctl import env as env_lib
from ctl.distributed import cluster as cluster_lib
from ctl.errors import UserError
from ctl.io import outputs
from ctl.platform import resolver

if TYPE_CHECKING:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top


@dataclasses.dataclass(frozen=True)
class Environment:
  """This process's place in its job, as its platform describes it.

  Attributes:
    cluster: who is in the cluster and which task this process is.
    dirs: the run's output directories (flags, else Vertex AI's AIP_*; a
      hyperparameter-tuning trial's own below `trial_<id>`).
    job_id: the supervisor's job id (CTL_JOB_ID, else Vertex AI's
      CLOUD_ML_JOB_ID), or "".
    restarts: how often the launcher restarted the job (CTL_RESTART_COUNT).
    strategy: the distribution strategy, or None until `with_strategy`.
  """

  cluster: cluster_lib.ClusterInfo
  dirs: outputs.OutputDirs
  job_id: str = ""
  restarts: int = 0
  strategy: "tf.distribute.Strategy | None" = None

  @property
  def is_chief(self) -> bool:
    """Whether this process owns the outputs (chief, else worker 0)."""
    return self.cluster.is_chief

  @property
  def rank(self) -> int:
    """This worker's number: the chief 0, then the workers."""
    return self.cluster.rank

  @property
  def num_workers(self) -> int:
    """Training processes in the job (1 on a laptop)."""
    return self.cluster.num_workers

  @property
  def is_evaluator(self) -> bool:
    """A side-car evaluator task: it trains nothing (ctl.train.evaluator)."""
    return self.cluster.is_evaluator

  def option_values(self) -> dict[str, Any]:
    """The `ctl.RunOptions` fields the environment decides, by field name.

    `ctl.RunOptions(**env.option_values(), train_steps=...)`: the caller adds
    the rest. A dict rather than RunOptions, which lives in a higher layer
    (docs/design.md, Layers).
    """
    return {
      "dirs": self.dirs,
      "is_chief": self.is_chief,
      "job_id": self.job_id,
      "restarts": self.restarts,
      "evaluator_writes_validation": self.cluster.has_evaluator,
    }

  def with_strategy(
    self, *, name: str = "auto", collective: str = "auto"
  ) -> "Environment":
    """This environment with its strategy built, said in one log line.

    Call it once, before TensorFlow runs any op, after the peers answered
    (`peers.wait_for_peers`). An evaluator trains with no one, whatever
    `name` the workers use.

    Args:
      name: a strategy name (ctl.distributed.strategies.STRATEGY_NAMES).
      collective: the all-reduce (strategies.COLLECTIVE_NAMES).

    Raises:
      UserError: a strategy or collective that this cluster cannot use.
    """
    # Imported here: TensorFlow loads with it, and `resolve` must not.
    from ctl.distributed import strategies  # pylint: disable=g-import-not-at-top

    strategy = strategies.make_strategy(
      name="auto" if self.is_evaluator else name,
      cluster=self.cluster,
      collective=collective,
    )
    logging.info(
      "%s; this process is %s %d of a %d-worker cluster.",
      strategies.describe(strategy),
      self.cluster.task_type,
      self.cluster.task_index,
      self.cluster.num_workers,
    )
    return dataclasses.replace(self, strategy=strategy)


def resolve(
  *,
  model_dir: str | None = None,
  checkpoint_dir: str | None = None,
  tensorboard_dir: str | None = None,
  export_dir: str | None = None,
  job_dir: str | None = None,
  environ: Mapping[str, str] = os.environ,
) -> Environment:
  """Reads the environment without TensorFlow (no strategy yet).

  Args:
    model_dir: the run's directory; None: Vertex AI's AIP_MODEL_DIR decides.
    checkpoint_dir: overrides `<model_dir>/checkpoints` (or AIP_*).
    tensorboard_dir: overrides `<model_dir>/tensorboard` (or AIP_*).
    export_dir: overrides `<model_dir>/saved_model` (or AIP_MODEL_DIR).
    job_dir: AI Platform's job directory, used when model_dir is not given.
    environ: the process environment.

  Raises:
    UserError: a malformed CTL_* variable, TF_CONFIG, CLUSTER_SPEC or JobSet
      environment, no output directory, or a bad gs:// url: one sentence.
  """
  env_lib.check(environ)
  cluster = cluster_lib.resolve(environ=environ)
  dirs = outputs.resolve_output_dirs(
    model_dir=model_dir,
    checkpoint_dir=checkpoint_dir,
    tensorboard_dir=tensorboard_dir,
    export_dir=export_dir,
    job_dir=job_dir,
    environ=environ,
  )
  return Environment(
    cluster=cluster,
    dirs=dirs,
    job_id=resolver.job_id(environ),
    restarts=env_lib.restart_count(environ),
  )


def check_chief(strategy: "tf.distribute.Strategy", is_chief: bool) -> None:
  """Refuses an `is_chief` given by hand that the strategy contradicts.

  The chief is the task of type "chief", or worker 0 in a cluster without
  one; a strategy without a cluster (one device, one machine) is its own
  chief. Two chiefs would both write the outputs; none would write nothing.

  Raises:
    UserError: `is_chief` disagrees with the strategy's cluster resolver.
  """
  resolver = getattr(strategy, "cluster_resolver", None)
  task_type = resolver.task_type if resolver else None
  if task_type is None:
    task, expected = "the only worker", True
  else:
    task_id = resolver.task_id
    jobs = resolver.cluster_spec().as_dict()
    task = f"{task_type} {task_id}"
    expected = task_type == "chief" or (
      task_type == "worker" and task_id == 0 and not jobs.get("chief")
    )
  if is_chief != expected:
    raise UserError(
      f"is_chief={is_chief}, but the strategy's cluster makes this process "
      f"{task}, {'the' if expected else 'not the'} chief; set "
      f"is_chief={expected} (ctl.environment's option_values do)."
    )
