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
`--submit --project=PROJECT --region=us-central1` to create the job directly,
and `--wait` to follow it until it ends (`ctl.cloud.vertex_follow`), the exit
status saying how it ended.
Needs the `vertex` extra (google-cloud-aiplatform).
"""

import argparse
from collections.abc import Mapping, Sequence
import dataclasses
import re
import sys
from typing import Any

from ctl import errors
from ctl.cloud import jobspecs
from ctl.cloud import reduction_server
from ctl.cloud import vertex_check
from ctl.cloud import vertex_follow
from ctl.io import storage
from ctl.train import options

# A duration flag: seconds, or a number with s, m, h or d ("36h", "7d").
_DURATION = re.compile(r"^(\d+(?:\.\d*)?)([smhd]?)$")
_UNIT_SECS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclasses.dataclass(frozen=True)
class JobSettings:
  """How and where a custom job runs, beyond its machines; None: Vertex AI's
  default. `vertex_check.validate_job_spec` checks every value.

  Attributes:
    scheduling_strategy: "STANDARD" (on-demand), "SPOT" (Spot VMs: cheap,
      preempted with about 30 s notice, which the trainer turns into an
      agreed save) or "FLEX_START" (Dynamic Workload Scheduler: waits for
      all GPUs at once), any case.
    timeout: The job's longest run, as a duration flag ("36h", "7d" or
      seconds).
    max_wait_duration: With FLEX_START, how long to wait for the machines
      ("0": for ever; Vertex AI's default is a day).
    disable_retries: Vertex AI does not retry the job after an internal
      error (nor restarts it on a worker's restart).
    service_account: The email of the service account the job runs as.
    network: The VPC to peer with, projects/PROJECT_NUMBER/global/networks/N.
    reserved_ip_ranges: Names of the network's ranges the job may use.
    boot_disk_type: Every trainer machine's boot disk, e.g. "pd-standard".
    boot_disk_size_gb: Its size in GB (Vertex AI's default: 100).
    tensorboard: A Vertex AI TensorBoard resource,
      projects/P/locations/REGION/tensorboards/ID, which then shows what the
      trainer writes to AIP_TENSORBOARD_LOG_DIR (its default --tensorboard_dir).
    persistent_resource_id: Run on this persistent resource's machines.
    enable_web_access: An interactive shell into each machine, from the
      console.
  """

  scheduling_strategy: str | None = None
  timeout: str | None = None
  max_wait_duration: str | None = None
  disable_retries: bool = False
  service_account: str | None = None
  network: str | None = None
  reserved_ip_ranges: tuple[str, ...] = ()
  boot_disk_type: str | None = None
  boot_disk_size_gb: int | None = None
  tensorboard: str | None = None
  persistent_resource_id: str | None = None
  enable_web_access: bool = False


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
  settings: JobSettings = JobSettings(),
) -> dict[str, Any]:
  """Builds a camelCase CustomJobSpec with identical machines in two pools,
  unchecked (`vertex_check.validate_job_spec` checks it).

  Args:
    image: The trainer image URI.
    num_workers: Machines in the job: the chief (pool 0) and pool 1.
    machine_type: The Compute Engine machine type of every machine.
    accelerator_type: An `AcceleratorType` name such as "NVIDIA_TESLA_V100", or
      None for machines without accelerators.
    accelerator_count: Accelerators per machine; None: what the machine type
      comes with (8 for a3-highgpu-8g), else 1.
    base_output_dir: A gs:// directory Vertex AI derives the AIP_* output
      directories from, or None.
    restart_job_on_worker_restart: Whether Vertex AI restarts the whole job
      when one worker restarts (multi-worker resume); None: with workers.
    trainer_args: The trainer's command line (containerSpec.args). Empty means
      the image's default CMD.
    reduction_server_count: Reducers in workerPoolSpecs[2] (of that machine
      type); 0 for none.
    settings: Scheduling (Spot, flex-start), identity, network, disks, ...

  Returns:
    The spec as a dict of camelCase fields, ready for YAML or JSON.

  Raises:
    errors.UserError: For a job of no or too many machines, an output dir
      off gs://, a bad duration, or reducers where they cannot pay.
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
    disk_spec=_disk_spec(settings),
  )
  scheduling = _scheduling(
    settings, restart=restart_job_on_worker_restart, num_workers=num_workers
  )
  return {"workerPoolSpecs": pools} | _job_fields(
    settings, base_output_dir=base_output_dir, scheduling=scheduling
  )


def _scheduling(
  settings: JobSettings, *, restart: bool | None, num_workers: int
) -> dict[str, Any]:
  """The spec's `scheduling`: strategy, limits, retries and restarts.

  A job restarts on a worker's restart when asked, or by default when it has
  more than one worker and Vertex AI may retry it (`disableRetries` turns
  restarts off, so a default never asks for both).
  """
  scheduling: dict[str, Any] = {}
  if restart or (
    restart is None and num_workers > 1 and not settings.disable_retries
  ):
    scheduling["restartJobOnWorkerRestart"] = True
  if settings.scheduling_strategy:
    scheduling["strategy"] = settings.scheduling_strategy.upper()
  for field, flag in (
    ("timeout", "timeout"),
    ("maxWaitDuration", "max_wait_duration"),
  ):
    if getattr(settings, flag) is not None:
      scheduling[field] = duration(getattr(settings, flag), flag=flag)
  if settings.disable_retries:
    scheduling["disableRetries"] = True
  return scheduling


def _job_fields(
  settings: JobSettings,
  *,
  base_output_dir: str | None,
  scheduling: dict[str, Any],
) -> dict[str, Any]:
  """The spec's top-level fields but the pools, those that are set."""
  fields = {
    "baseOutputDirectory": base_output_dir
    and {"outputUriPrefix": base_output_dir},
    "scheduling": scheduling,
    "serviceAccount": settings.service_account,
    "network": settings.network,
    "reservedIpRanges": list(settings.reserved_ip_ranges),
    "tensorboard": settings.tensorboard,
    "persistentResourceId": settings.persistent_resource_id,
    "enableWebAccess": settings.enable_web_access,
  }
  return {name: value for name, value in fields.items() if value}


def _disk_spec(settings: JobSettings) -> dict[str, Any]:
  """The trainer machines' `diskSpec`, or {} for Vertex AI's default."""
  disk: dict[str, Any] = {}
  if settings.boot_disk_type:
    disk["bootDiskType"] = settings.boot_disk_type
  if settings.boot_disk_size_gb is not None:
    disk["bootDiskSizeGb"] = settings.boot_disk_size_gb
  return disk


def duration(text: str, *, flag: str) -> str:
  """A duration flag ("90s", "30m", "36h", "7d", or seconds) as the API's
  "Ns" (what CustomJobSpec's Duration fields read).

  Raises:
    errors.UserError: If `text` is none of those.
  """
  match = _DURATION.match(str(text).strip())
  if not match:
    raise errors.UserError(
      f"{flag} {text!r} is not a duration; give seconds or a number with s, "
      "m, h or d, such as 36h."
    )
  secs = float(match[1]) * _UNIT_SECS[match[2]]
  return f"{secs:.9f}".rstrip("0").rstrip(".") + "s"


def _worker_pools(
  num_workers: int,
  *,
  accelerator_type: str | None,
  accelerator_count: int | None,
  trainer_args: Sequence[str],
  reducers: int,
  reducer_machine_type: str,
  disk_spec: dict[str, Any],
  **machine: str,
) -> list[dict[str, Any]]:
  """The chief's pool, the other workers' pool, the reducers' pool.

  Pools without machines are left out; `disk_spec` is the trainers' boot disk
  (the reducers keep Vertex AI's). An accelerator type without a count
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
    | ({"diskSpec": dict(disk_spec)} if disk_spec else {})
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
    client: A `JobServiceClient`; None means `client_for(region)`.

  Returns:
    The job's resource name, projects/P/locations/R/customJobs/ID.

  Raises:
    errors.UserError: If the spec is invalid, there are no credentials,
      Vertex AI refuses the request (a 4xx answer), or it cannot be reached
      (no network, a token that cannot be refreshed, a 5xx answer).
  """
  job_spec = vertex_check.validate_job_spec(spec)
  vertex_check.check_region(job_spec, region)
  aiplatform_v1 = vertex_check.import_aiplatform()
  # It comes with google-cloud-aiplatform.
  from google.api_core import exceptions as api_exceptions  # pylint: disable=g-import-not-at-top

  client = client or client_for(region)
  try:
    job = client.create_custom_job(
      parent=f"projects/{project}/locations/{region}",
      custom_job=aiplatform_v1.CustomJob(
        display_name=display_name, job_spec=job_spec
      ),
    )
  except api_exceptions.ClientError as e:
    reason = e.message.rstrip(".")
    raise errors.UserError(f"Vertex AI refused the job: {reason}.") from None
  except vertex_follow.unreached_errors() as e:
    reason = errors.error_sentence(e).rstrip(".")
    raise errors.UserError(
      f"Could not reach Vertex AI ({type(e).__name__}: {reason}); check the "
      "network, then submit again."
    ) from None
  return job.name


def client_for(region: str) -> Any:
  """A `JobServiceClient` of the regional endpoint, with Application Default
  Credentials.

  Raises:
    errors.UserError: If there are no credentials, saying how to get them.
  """
  aiplatform_v1 = vertex_check.import_aiplatform()
  # It comes with google-cloud-aiplatform.
  from google.auth import exceptions as auth_exceptions  # pylint: disable=g-import-not-at-top

  try:
    return aiplatform_v1.JobServiceClient(
      client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"}
    )
  except auth_exceptions.DefaultCredentialsError as e:
    reason = str(e).split(". ")[0].rstrip(".")
    raise errors.UserError(
      f"Google Cloud credentials are missing ({reason}); run gcloud auth "
      "application-default login."
    ) from None


def main(argv: Sequence[str] | None = None) -> int:
  """Runs `ctl-vertex`; see the module docstring. Returns the exit code."""
  argv, trainer_args = jobspecs.split_trainer_args(
    sys.argv[1:] if argv is None else argv
  )
  args = _parser().parse_args(argv)
  return jobspecs.run(lambda: _build_and_send(args, trainer_args))


def _build_and_send(
  args: argparse.Namespace, trainer_args: list[str]
) -> str | int:
  """Builds the spec from the command line; returns it, or the job's name,
  or with --wait how the job ended (the name printed first)."""
  spec = options.from_flags(
    build_job_spec,
    args,
    trainer_args=trainer_args,
    settings=options.from_flags(JobSettings, args),
  )
  if args.wait and not args.submit:
    raise errors.UserError(
      "--wait follows the job --submit creates; give --submit too."
    )
  if not args.submit:
    vertex_check.validate_job_spec(spec)
    return jobspecs.format_spec(spec, args.format)
  if not (args.project and args.region):
    raise errors.UserError("--submit needs --project and --region.")
  # A bad spec is said before credentials are looked for.
  vertex_check.check_region(vertex_check.validate_job_spec(spec), args.region)
  client = client_for(args.region)
  name = options.from_flags(submit, args, spec=spec, client=client)
  if not args.wait:
    return name
  print(name, flush=True)
  return vertex_follow.follow(
    name,
    client=client,
    poll_secs=args.poll_secs,
    cancel_on_interrupt=args.cancel_on_interrupt,
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
  _add_settings_flags(parser)
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
  parser.add_argument(
    "--wait",
    action="store_true",
    help="With --submit: follow the job until it ends, printing its state "
    "changes and where its logs are; exit 0 if it succeeded, 1 if not.",
  )
  parser.add_argument(
    "--poll_secs",
    type=float,
    default=vertex_follow.DEFAULT_POLL_SECS,
    help="With --wait: seconds between two reads of the job's state.",
  )
  parser.add_argument(
    "--cancel_on_interrupt",
    action="store_true",
    help="With --wait: Ctrl-C cancels the job (default: it runs on).",
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


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
  """The flags of `JobSettings`: scheduling, identity, network, disks..."""
  add = parser.add_argument
  add(
    "--scheduling_strategy",
    help="STANDARD (on-demand, the default), SPOT (Spot VMs: preempted with "
    "about 30 s notice, which the trainer turns into an agreed save) or "
    "FLEX_START (waits until all machines can start at once).",
  )
  add("--timeout", help="Longest run of the job: seconds, or 90m, 36h, 7d.")
  add(
    "--max_wait_duration",
    help="FLEX_START: longest wait for the machines (0: no limit; Vertex AI's "
    "default: 1 day).",
  )
  add(
    "--disable_retries",
    action="store_true",
    help="Do not retry the job after an internal error (no restart on a "
    "worker's restart either).",
  )
  add("--service_account", help="Email of the service account the job runs as.")
  add("--network", help="VPC to peer: projects/NUMBER/global/networks/NAME.")
  add(
    "--reserved_ip_ranges",
    type=lambda text: tuple(name for name in text.split(",") if name),
    default=(),
    help="Comma-separated names of the network's ranges the job may use.",
  )
  add("--boot_disk_type", help="pd-ssd (default), pd-standard, ...")
  add("--boot_disk_size_gb", type=int, help="Boot disk size: 100 to 64000.")
  add(
    "--tensorboard",
    help="Vertex AI TensorBoard: projects/P/locations/REGION/tensorboards/ID; "
    "shows the trainer's TensorBoard directory (needs --base_output_dir and "
    "--service_account).",
  )
  add("--persistent_resource_id", help="Run on this persistent resource.")
  add(
    "--enable_web_access",
    action="store_true",
    help="An interactive shell into each machine, from the console.",
  )


if __name__ == "__main__":
  sys.exit(main())
