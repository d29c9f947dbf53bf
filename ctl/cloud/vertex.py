"""Vertex AI custom jobs: build a CustomJobSpec, check it offline, submit it.

A CustomJobSpec is what `gcloud ai custom-jobs create --config=FILE` reads
(camelCase YAML) and what the Vertex AI API takes as a job's `jobSpec`. Every
spec built here is checked offline (`ctl.cloud.vertex_check`, against the protos of
`google.cloud.aiplatform_v1`) before it is printed or sent.

The layout follows the Vertex AI multi-worker codelab: worker pool 0 is the
chief (always one replica) and worker pool 1 holds the other workers. Vertex AI
turns that into a TF_CONFIG with task types "chief" and "worker" on every
replica, and sets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR
when the spec has a `baseOutputDirectory`.

Usage:

  ctl-vertex --image=us-docker.pkg.dev/PROJECT/ctl/trainer:latest \
      --num_workers=2 --accelerator_type=NVIDIA_TESLA_V100 \
      --base_output_dir=gs://your-bucket/cassava \
      -- --flagfile=configs/cassava_resnet50.cfg --strategy=multi_worker

prints the spec as YAML for `gcloud ai custom-jobs create --config`; add
`--submit --project=PROJECT --region=us-central1` to create the job directly.
Needs the `vertex` extra (google-cloud-aiplatform).
"""

import argparse
from collections.abc import Mapping, Sequence
import sys
from typing import TYPE_CHECKING, Any

from ctl import errors
from ctl.cloud import jobspecs
from ctl.cloud import reduction_server
from ctl.cloud import vertex_check
from ctl.io import storage
from ctl.train import options

if TYPE_CHECKING:
  pass


def build_job_spec(
  *,
  image: str,
  num_workers: int = 1,
  machine_type: str = "n1-standard-8",
  accelerator_type: str | None = None,
  accelerator_count: int | None = None,
  base_output_dir: str | None = None,
  restart_job_on_worker_restart: bool | None = None,
  trainer_args: Sequence[str] = (),
  reduction_server_count: int = 0,
  reduction_server_machine_type: str = reduction_server.DEFAULT_MACHINE_TYPE,
) -> dict[str, Any]:
  """Builds a camelCase CustomJobSpec with identical machines in two pools.

  The result is not checked; pass it to `vertex_check.validate_job_spec`.

  Args:
    image: The trainer image URI.
    num_workers: Machines in the job, the chief included. The chief is pool 0;
      the other `num_workers - 1` machines form pool 1.
    machine_type: The Compute Engine machine type of every machine.
    accelerator_type: An `AcceleratorType` name such as "NVIDIA_TESLA_V100", or
      None for machines without accelerators.
    accelerator_count: Accelerators per machine; None: what the machine type
      comes with (8 for a3-highgpu-8g), else 1.
    base_output_dir: A gs:// directory Vertex AI derives the AIP_* output
      directories from, or None.
    restart_job_on_worker_restart: Whether Vertex AI restarts the whole job when
      one worker restarts, which multi-worker training needs to resume from a
      checkpoint. None means "when there is more than one worker".
    trainer_args: The trainer's command line (containerSpec.args). Empty means
      the image's default CMD.

  Returns:
    The spec as a dict of camelCase fields, ready for YAML or JSON.

  Raises:
    errors.UserError: If `num_workers` is below 1 or above
      `vertex_check.MAX_MACHINES`, `base_output_dir` is
      not a valid gs:// url, or reducers are asked for where they cannot pay
      (one machine, no accelerators, a collective other than NCCL).
  """
  _check_machines(num_workers=num_workers, base_output_dir=base_output_dir)
  pools = _worker_pools(
    num_workers,
    image=image,
    machine_type=machine_type,
    accelerator_type=accelerator_type,
    accelerator_count=accelerator_count,
    trainer_args=trainer_args,
    reducers=reduction_server_count,
    reducer_machine_type=reduction_server_machine_type,
  )
  return {
    "workerPoolSpecs": pools,
    **_job_settings(
      num_workers, base_output_dir, restart_job_on_worker_restart
    ),
  }


def _job_settings(
  num_workers: int, base_output_dir: str | None, restart: bool | None
) -> dict[str, Any]:
  """The spec's output directory and restart policy (None: restart the job
  on a worker's restart when there is more than one worker)."""
  settings = {}
  if base_output_dir:
    settings["baseOutputDirectory"] = {"outputUriPrefix": base_output_dir}
  if restart or (restart is None and num_workers > 1):
    settings["scheduling"] = {"restartJobOnWorkerRestart": True}
  return settings


def _worker_pools(
  num_workers: int,
  *,
  accelerator_type: str | None,
  accelerator_count: int | None,
  trainer_args: Sequence[str],
  reducers: int,
  reducer_machine_type: str,
  **machine: str,
) -> list[dict[str, Any]]:
  """The chief's pool, the other workers' pool, the reducers' pool.

  Pools without machines are left out. An accelerator type without a count
  takes what the machine type comes with (8 for a3-highgpu-8g), else 1.
  Reducers are refused where they cannot pay, and make the trainer's
  all-reduce NCCL.
  """
  if accelerator_type and accelerator_count is None:
    accelerator_count = (
      vertex_check.gpus_in_machine_type(machine["machine_type"]) or 1
    )
  if reducers:
    _check_reduction_server_pays(num_workers, accelerator_type)
    trainer_args = reduction_server.with_nccl(trainer_args)
  pools = [
    _pool(
      count,
      **machine,
      accelerator_type=accelerator_type,
      accelerator_count=accelerator_count,
      trainer_args=trainer_args,
    )
    for count in (1, num_workers - 1)
    if count
  ]
  if reducers:
    pools.append(
      reduction_server.pool(count=reducers, machine_type=reducer_machine_type)
    )
  return pools


def _check_machines(*, num_workers: int, base_output_dir: str | None) -> None:
  """Refuses a job without a chief, of more machines than any job gets, or
  with an output dir off Cloud Storage."""
  if num_workers < 1:
    raise errors.UserError(
      f"num_workers counts the chief too, so it must be at least 1, not "
      f"{num_workers}."
    )
  if num_workers > vertex_check.MAX_MACHINES:
    raise errors.UserError(
      f"num_workers must be at most {vertex_check.MAX_MACHINES} machines, not "
      f"{num_workers}; more is taken for a typo."
    )
  if base_output_dir:
    if not base_output_dir.startswith("gs://"):
      raise errors.UserError(
        f"base_output_dir must be a gs:// url, not {base_output_dir}."
      )
    storage.check_url(base_output_dir)


def _pool(
  replica_count: int,
  *,
  image: str,
  machine_type: str,
  accelerator_type: str | None,
  accelerator_count: int | None,
  trainer_args: Sequence[str],
) -> dict[str, Any]:
  """One worker pool of identical machines running the trainer image.

  Fresh dicts each call: shared ones would be written as YAML aliases.
  """
  machine_spec = {"machineType": machine_type}
  if accelerator_type:
    machine_spec["acceleratorType"] = accelerator_type
  if accelerator_count:
    machine_spec["acceleratorCount"] = accelerator_count
  container_spec = {"imageUri": image}
  if trainer_args:
    container_spec["args"] = list(trainer_args)
  return {
    "replicaCount": replica_count,
    "machineSpec": machine_spec,
    "containerSpec": container_spec,
  }


def _check_reduction_server_pays(
  num_workers: int, accelerator_type: str | None
) -> None:
  """Refuses reducers for a job whose all-reduce they cannot speed up."""
  if num_workers < 2:
    raise errors.UserError(
      "Reduction Server reduces between machines, so it needs num_workers of"
      f" at least 2, not {num_workers}."
    )
  if not accelerator_type:
    raise errors.UserError(
      "Reduction Server only speeds up NCCL all-reduce between GPU workers;"
      " set --accelerator_type."
    )


def submit(
  spec: Mapping[str, Any],
  *,
  project: str,
  region: str,
  display_name: str,
  client: Any = None,
) -> str:
  """Validates `spec` and creates a Vertex AI custom job that runs it.

  The spec goes to the API exactly as validated, which is why this uses the
  generated `aiplatform_v1.JobServiceClient` rather than the higher-level
  `aiplatform.CustomJob`, which rebuilds the spec from its own arguments.

  Args:
    spec: A camelCase CustomJobSpec.
    project: The Google Cloud project ID.
    region: The Vertex AI region, e.g. "us-central1".
    display_name: The job's name in the console.
    client: A `JobServiceClient`; None means the regional endpoint with
      Application Default Credentials.

  Returns:
    The job's resource name, projects/P/locations/R/customJobs/ID.

  Raises:
    errors.UserError: If the spec is invalid, there are no credentials, or
      Vertex AI refuses the request (a 4xx answer).
  """
  job_spec = vertex_check.validate_job_spec(spec)
  aiplatform_v1 = vertex_check.import_aiplatform()
  # Both come with google-cloud-aiplatform.
  from google.api_core import exceptions as api_exceptions  # pylint: disable=g-import-not-at-top
  from google.auth import exceptions as auth_exceptions  # pylint: disable=g-import-not-at-top

  try:
    if client is None:
      endpoint = f"{region}-aiplatform.googleapis.com"
      client = aiplatform_v1.JobServiceClient(
        client_options={"api_endpoint": endpoint}
      )
    job = client.create_custom_job(
      parent=f"projects/{project}/locations/{region}",
      custom_job=aiplatform_v1.CustomJob(
        display_name=display_name, job_spec=job_spec
      ),
    )
  except auth_exceptions.DefaultCredentialsError as e:
    reason = str(e).split(". ")[0].rstrip(".")
    raise errors.UserError(
      f"Google Cloud credentials are missing ({reason}); run gcloud auth "
      "application-default login."
    ) from None
  except api_exceptions.ClientError as e:
    reason = e.message.rstrip(".")
    raise errors.UserError(f"Vertex AI refused the job: {reason}.") from None
  return job.name


def main(argv: Sequence[str] | None = None) -> int:
  """Runs `ctl-vertex`; see the module docstring. Returns the exit code."""
  argv, trainer_args = jobspecs.split_trainer_args(
    sys.argv[1:] if argv is None else argv
  )
  args = _parser().parse_args(argv)
  return jobspecs.run(lambda: _build_and_send(args, trainer_args))


def _build_and_send(args: argparse.Namespace, trainer_args: list[str]) -> str:
  """Builds the spec from the command line; returns it, or the job's name."""
  spec = options.from_flags(build_job_spec, args, trainer_args=trainer_args)
  if not args.submit:
    vertex_check.validate_job_spec(spec)
    return jobspecs.format_spec(spec, args.format)
  if not (args.project and args.region):
    raise errors.UserError("--submit needs --project and --region.")
  return submit(
    spec,
    project=args.project,
    region=args.region,
    display_name=args.display_name,
  )


def _parser() -> argparse.ArgumentParser:
  """The `ctl-vertex` command line; trainer arguments follow `--`."""
  parser = errors.ArgumentParser(
    prog="ctl-vertex",
    description="Build, check and optionally submit a Vertex AI custom job "
    "that runs the trainer image on one or more machines.",
    epilog="Arguments after -- become the trainer command line "
    "(containerSpec.args); without them the image default CMD runs.",
  )
  _add_job_flags(parser)
  parser.add_argument(
    "--reduction_server_count",
    type=int,
    default=0,
    help="Reduction Server reducers (workerPoolSpecs[2]); needs GPU workers "
    "and adds --collective=nccl to the trainer. Default: none.",
  )
  parser.add_argument(
    "--reduction_server_machine_type",
    default=reduction_server.DEFAULT_MACHINE_TYPE,
    help="Machine type of every reducer.",
  )
  parser.add_argument(
    "--format",
    choices=("yaml", "json"),
    default="yaml",
    help="How to print the spec when not submitting.",
  )
  parser.add_argument(
    "--submit",
    action="store_true",
    help="Create the job on Vertex AI instead of printing the spec.",
  )
  parser.add_argument("--project", help="Google Cloud project for --submit.")
  parser.add_argument("--region", help="Vertex AI region for --submit.")
  parser.add_argument(
    "--display_name",
    default="ctl-trainer",
    help="Job name shown in the console, for --submit.",
  )
  return parser


def _add_job_flags(parser: argparse.ArgumentParser) -> None:
  """The flags of the job itself: image, machines, outputs, restarts."""
  parser.add_argument(
    "--image",
    required=True,
    help="Trainer image URI, e.g. us-docker.pkg.dev/PROJECT/ctl/trainer:tag.",
  )
  parser.add_argument(
    "--num_workers",
    type=int,
    default=1,
    help="Machines in the job, the chief included.",
  )
  parser.add_argument(
    "--machine_type",
    default="n1-standard-8",
    help="Compute Engine machine type of every machine.",
  )
  parser.add_argument(
    "--accelerator_type",
    help="e.g. NVIDIA_TESLA_V100, NVIDIA_TESLA_A100, NVIDIA_H100_80GB; "
    "omit for CPU-only machines.",
  )
  parser.add_argument(
    "--accelerator_count",
    type=int,
    help="Accelerators per machine; default: what the machine type comes "
    "with (a3-highgpu-8g: 8), else 1.",
  )
  parser.add_argument(
    "--base_output_dir",
    help="gs:// directory; Vertex AI sets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR "
    "and AIP_TENSORBOARD_LOG_DIR under it.",
  )
  restart = parser.add_mutually_exclusive_group()
  restart.add_argument(
    "--restart_job_on_worker_restart",
    action="store_true",
    help="Restart the whole job when a worker restarts (default when "
    "num_workers > 1).",
  )
  restart.add_argument(
    "--norestart_job_on_worker_restart",
    action="store_false",
    dest="restart_job_on_worker_restart",
  )
  parser.set_defaults(restart_job_on_worker_restart=None)


if __name__ == "__main__":
  sys.exit(main())
