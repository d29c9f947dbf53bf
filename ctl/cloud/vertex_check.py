"""Checks a Vertex AI CustomJobSpec offline, the way gcloud and Vertex AI would.

A typo in a spec, an accelerator that does not exist or a chief pool with two
replicas is otherwise found only after the job is queued, or never. Here the
spec (camelCase, as `gcloud ai custom-jobs create --config=FILE` reads it) is
parsed into the protos of `google.cloud.aiplatform_v1`, and what the protos
allow but Vertex AI refuses is checked by field path, each problem in one
sentence. `ctl.cloud.vertex` builds specs and submits them; this module only reads.
"""

from collections.abc import Mapping
import difflib
import re
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor as descriptor_lib
from google.protobuf import json_format

from ctl import errors
from ctl.cloud import reduction_server

if TYPE_CHECKING:
  from google.cloud import aiplatform_v1

# Accelerator-optimized machine types carry their GPU count in the name
# (a2-highgpu-1g, a3-highgpu-8g, a4-highgpu-8g) and take exactly that many.
_FIXED_GPU_MACHINE_TYPE = re.compile(r"^a\d+\w*-\w+-(\d+)g$")
# What Vertex AI training runs on, as data. Sources (read 2025): Vertex AI,
# "Configure compute resources for custom training"
# (https://cloud.google.com/vertex-ai/docs/training/configure-compute), and
# Compute Engine, "GPU machine types" (https://cloud.google.com/compute/docs/gpus).
# Machine types are SERIES-CLASS-SIZE[g|t] (n1-standard-8, a2-highgpu-1g,
# ct5lp-hightpu-4t) of these series, or cloud-tpu (TPU v2 and v3).
_MACHINE_TYPE = re.compile(
  r"^(?P<series>[a-z]+\d+[a-z]*)-[a-z]+-(?P<size>\d+)[gt]?$"
)
_MACHINE_SERIES = (
  "a2", "a3", "a4", "a4x", "c2", "ct4p", "ct5lp", "ct6e", "e2", "g2", "g4",
  "m1", "n1", "n2",
)  # fmt: skip
# GPUs attach to N1 machines only in these counts, each count to machines of
# at most so many vCPUs (P100 x4: 64 in most zones, 96 in some).
_N1_GPUS = {
  "NVIDIA_TESLA_T4": {1: 48, 2: 48, 4: 96},
  "NVIDIA_TESLA_V100": {1: 12, 2: 24, 4: 48, 8: 96},
  "NVIDIA_TESLA_P100": {1: 16, 2: 32, 4: 96},
  "NVIDIA_TESLA_P4": {1: 24, 2: 48, 4: 96},
}
# Every other accelerator comes with its own machine types, in the count the
# type fixes (in its name, or for G-series by size in _G_SERIES_GPUS).
_ACCELERATOR_MACHINES = {
  "NVIDIA_TESLA_A100": ("a2-highgpu", "a2-megagpu"),
  "NVIDIA_A100_80GB": ("a2-ultragpu",),
  "NVIDIA_L4": ("g2-standard",),
  "NVIDIA_RTX_PRO_6000": ("g4-standard",),
  "NVIDIA_H100_80GB": ("a3-highgpu",),
  "NVIDIA_H100_MEGA_80GB": ("a3-megagpu",),
  "NVIDIA_H200_141GB": ("a3-ultragpu",),
  "NVIDIA_B200": ("a4-highgpu",),
  "NVIDIA_GB200": ("a4x-highgpu",),
  "TPU_V2": ("cloud-tpu",),
  "TPU_V3": ("cloud-tpu",),
  "TPU_V4_POD": ("ct4p-hightpu",),
  "TPU_V5_LITEPOD": ("ct5lp-hightpu",),
} | {name: ("n1",) for name in _N1_GPUS}
_G_SERIES_GPUS = {
  "g2-standard": {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8},
  "g4-standard": {48: 1, 96: 2, 192: 4, 384: 8},
}
# Not a Vertex AI limit (that is quota) but a guard against a typo such as
# --num_workers=1000000; raise it for a larger job.
MAX_MACHINES = 1000
# Vertex AI, "Schedule training jobs based on resource availability" (read
# 2026): FLEX_START (Dynamic Workload Scheduler) takes these GPUs, the same
# machines in every pool, and a timeout of at most 7 days.
_FLEX_START_ACCELERATORS = (
  "NVIDIA_L4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_H100_80GB",
  "NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB", "NVIDIA_B200",
)  # fmt: skip
_FLEX_START_MAX_TIMEOUT_SECS = 7 * 86400
# Vertex AI, "Configure compute resources for custom training": boot disks.
_BOOT_DISK_TYPES = ("pd-ssd", "pd-standard", "hyperdisk-balanced")
_BOOT_DISK_GB = (100, 64000)
_SERVICE_ACCOUNT = re.compile(r"^[^@\s]+@[-a-z0-9.]+\.gserviceaccount\.com$")
_NETWORK = re.compile(
  r"^projects/\d+/global/networks/[a-z]([-a-z0-9]*[a-z0-9])?$"
)
_RANGE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_TENSORBOARD = re.compile(
  r"^projects/[^/]+/locations/(?P<region>[a-z0-9-]+)/tensorboards/[^/]+$"
)
_PERSISTENT_RESOURCE_ID = re.compile(r"^[a-z][-a-z0-9]{3,61}[a-z0-9]$")


def validate_job_spec(spec: Any) -> "aiplatform_v1.CustomJobSpec":
  """Checks a camelCase CustomJobSpec the way gcloud and Vertex AI would.

  Beyond parsing into the library's proto (field names, value types, enum
  names), it rejects snake_case keys (gcloud does), a chief pool without
  exactly one replica, pools without replicas, machine type or image,
  accelerator counts without a type and the reverse, a machine type of no
  series Vertex AI trains on, an accelerator on machines it does not attach
  to (a V100 on e2, an A100 on n1), GPU counts that do not match an
  accelerator-optimized machine type or that N1 does not take (nine V100s, one
  V100 on 32 vCPUs), more than `MAX_MACHINES` machines, and a non-gs://
  output directory; and of the job's settings, a scheduling that Vertex AI
  refuses (a deprecated strategy, FLEX_START on other GPUs or machines, a
  maximum wait without it, no retries with restarts), names that are not a
  service account, network, range, TensorBoard or persistent resource, a
  TensorBoard without the output directory it shows or the service account
  it needs, and boot disks Vertex AI has not.

  Args:
    spec: The spec as loaded from YAML or JSON, or built by `build_job_spec`.

  Returns:
    The parsed `google.cloud.aiplatform_v1.CustomJobSpec`.

  Raises:
    errors.UserError: If anything is wrong, in one sentence that names the
      field.
  """
  aiplatform_v1 = import_aiplatform()
  message = aiplatform_v1.CustomJobSpec.pb(aiplatform_v1.CustomJobSpec())
  _check_fields(spec, message.DESCRIPTOR, path="")
  try:
    json_format.ParseDict(spec, message)
  except json_format.ParseError as e:
    raise errors.UserError(_parse_error_sentence(e)) from None
  _check_worker_pools(message, aiplatform_v1)
  reduction_server.check(message.worker_pool_specs)
  _check_scheduling(message, aiplatform_v1)
  _check_identity_and_network(message)
  _check_boot_disks(message.worker_pool_specs)
  if message.HasField("base_output_directory"):
    prefix = message.base_output_directory.output_uri_prefix
    if not prefix.startswith("gs://"):
      raise errors.UserError(
        f"baseOutputDirectory.outputUriPrefix must be a gs:// URI, not "
        f"{prefix!r}."
      )
  return aiplatform_v1.CustomJobSpec.wrap(message)


def _check_scheduling(message: Any, aiplatform_v1: Any) -> None:
  """Checks the strategy against the machines, durations and retries."""
  scheduling = message.scheduling
  strategy = aiplatform_v1.Scheduling.Strategy(scheduling.strategy).name
  if strategy in ("ON_DEMAND", "LOW_COST"):
    raise errors.UserError(
      f"scheduling.strategy {strategy} is deprecated; use SPOT (Spot VMs) "
      "or STANDARD (on-demand)."
    )
  if scheduling.HasField("timeout"):
    timeout = scheduling.timeout.ToTimedelta().total_seconds()
    if timeout <= 0:
      raise errors.UserError(
        f"scheduling.timeout must be more than 0s, not {timeout:g}s."
      )
  if strategy == "FLEX_START":
    _check_flex_start(message, aiplatform_v1)
  elif scheduling.HasField("max_wait_duration"):
    raise errors.UserError(
      "scheduling.maxWaitDuration applies to FLEX_START only; drop it or set "
      "scheduling.strategy to FLEX_START."
    )
  if scheduling.disable_retries and scheduling.restart_job_on_worker_restart:
    raise errors.UserError(
      "scheduling.disableRetries turns restartJobOnWorkerRestart off; drop "
      "one of them."
    )


def _check_flex_start(message: Any, aiplatform_v1: Any) -> None:
  """FLEX_START's terms: its GPUs, one machineSpec, at most 7 days."""
  pools = [pool for pool in message.worker_pool_specs if pool.ByteSize()]
  for index, pool in enumerate(message.worker_pool_specs):
    if not pool.ByteSize():
      continue
    if pool.machine_spec != pools[0].machine_spec:
      raise errors.UserError(
        "scheduling.strategy FLEX_START needs the same machineSpec in every "
        f"worker pool; workerPoolSpecs[{index}] differs from the chief's."
      )
  accelerator = aiplatform_v1.AcceleratorType(
    pools[0].machine_spec.accelerator_type
  ).name
  if accelerator not in _FLEX_START_ACCELERATORS:
    raise errors.UserError(
      "scheduling.strategy FLEX_START needs workers with "
      f"{', '.join(_FLEX_START_ACCELERATORS)} GPUs, not {accelerator}."
    )
  scheduling = message.scheduling
  timeout = scheduling.timeout.ToTimedelta().total_seconds()
  if timeout > _FLEX_START_MAX_TIMEOUT_SECS:
    raise errors.UserError(
      f"scheduling.timeout must be at most {_FLEX_START_MAX_TIMEOUT_SECS}s "
      f"(7 days) with FLEX_START, not {timeout:g}s."
    )
  if scheduling.max_wait_duration.ToTimedelta().total_seconds() < 0:
    raise errors.UserError(
      "scheduling.maxWaitDuration must be 0s (no limit) or more."
    )


def _check_identity_and_network(message: Any) -> None:
  """Checks the names of the service account, network, ranges, TensorBoard
  and persistent resource, and what a TensorBoard needs."""
  for field, value, pattern, form in (
    ("serviceAccount", message.service_account, _SERVICE_ACCOUNT,
     "a service account email, NAME@PROJECT.iam.gserviceaccount.com"),
    ("network", message.network, _NETWORK,
     "projects/PROJECT_NUMBER/global/networks/NAME"),
    ("tensorboard", message.tensorboard, _TENSORBOARD,
     "projects/PROJECT/locations/REGION/tensorboards/ID"),
  ):  # fmt: skip
    if value and not pattern.match(value):
      raise errors.UserError(f"{field} {value!r} is not {form}.")
  resource = message.persistent_resource_id
  if resource and not _PERSISTENT_RESOURCE_ID.match(resource):
    raise errors.UserError(
      f"persistentResourceId {resource!r} must be 5 to 63 lowercase letters, "
      "digits and '-', starting with a letter."
    )
  if message.reserved_ip_ranges and not message.network:
    raise errors.UserError("reservedIpRanges need a network; give network too.")
  for index, name in enumerate(message.reserved_ip_ranges):
    if not _RANGE_NAME.match(name):
      raise errors.UserError(
        f"reservedIpRanges[{index}] {name!r} is not a range name (lowercase "
        "letters, digits and '-')."
      )
  if message.tensorboard and not message.HasField("base_output_directory"):
    raise errors.UserError(
      "tensorboard shows what the trainer writes under baseOutputDirectory "
      "(AIP_TENSORBOARD_LOG_DIR); give baseOutputDirectory too."
    )
  if message.tensorboard and not message.service_account:
    raise errors.UserError(
      "tensorboard needs a serviceAccount that may write to it; give one."
    )


def _check_boot_disks(pools: Any) -> None:
  """Checks each pool's boot disk type and size, where it sets them."""
  low, high = _BOOT_DISK_GB
  for index, pool in enumerate(pools):
    disk = pool.disk_spec
    where = f"workerPoolSpecs[{index}].diskSpec"
    if disk.boot_disk_type and disk.boot_disk_type not in _BOOT_DISK_TYPES:
      raise errors.UserError(
        f"{where}.bootDiskType {disk.boot_disk_type!r} is not one of "
        f"{', '.join(_BOOT_DISK_TYPES)}."
      )
    if disk.boot_disk_size_gb and not low <= disk.boot_disk_size_gb <= high:
      raise errors.UserError(
        f"{where}.bootDiskSizeGb must be {low} to {high}, not "
        f"{disk.boot_disk_size_gb}."
      )


def check_region(job_spec: "aiplatform_v1.CustomJobSpec", region: str) -> None:
  """Refuses a job whose TensorBoard lives in another region than the job's.

  Args:
    job_spec: A spec `validate_job_spec` returned.
    region: The Vertex AI region the job is sent to.

  Raises:
    errors.UserError: If the regions differ.
  """
  match = _TENSORBOARD.match(job_spec.tensorboard)
  if match and match["region"] != region:
    raise errors.UserError(
      f"tensorboard {job_spec.tensorboard} is in {match['region']}, not "
      f"{region}, the job's region; use a TensorBoard of {region}."
    )


def _check_fields(
  value: Any, descriptor: descriptor_lib.Descriptor, *, path: str
) -> None:
  """Rejects unknown or snake_case keys and unknown enum names, by path.

  `json_format.ParseDict` catches most of these too, but accepts snake_case
  and enum numbers (gcloud does not) and words its errors as a chain of
  nested messages.

  Args:
    value: The part of the spec at `path`.
    descriptor: The message type expected at `path`.
    path: Where `value` is, like "workerPoolSpecs[0].machineSpec"; "" for the
      top.

  Raises:
    errors.UserError: On the first problem found.
  """
  where = path or "the job spec"
  if not isinstance(value, Mapping):
    raise errors.UserError(
      f"{where} must be a mapping of field names to values, not {_kind(value)}."
    )
  fields = {field.json_name: field for field in descriptor.fields}
  for key, item in value.items():
    field = fields.get(key)
    if field is None:
      raise errors.UserError(_unknown_field_sentence(key, where, descriptor))
    field_path = f"{path}.{key}" if path else key
    if field.enum_type is not None and (
      not isinstance(item, str) or item not in field.enum_type.values_by_name
    ):
      known = ", ".join(
        v.name
        for v in field.enum_type.values
        if not v.name.endswith("_UNSPECIFIED")
      )
      raise errors.UserError(
        f"{field_path} {item!r} is not a Vertex AI {field.enum_type.name}; "
        f"use one of {known}."
      )
    message_type = field.message_type
    if message_type is None or message_type.full_name.startswith(
      "google.protobuf."
    ):
      continue  # Scalars and well-known types: ParseDict checks the values.
    if not field.is_repeated:
      _check_fields(item, message_type, path=field_path)
    elif not isinstance(item, list):
      raise errors.UserError(f"{field_path} must be a list, not {_kind(item)}.")
    else:
      for index, element in enumerate(item):
        _check_fields(element, message_type, path=f"{field_path}[{index}]")


def _check_worker_pools(message: Any, aiplatform_v1: Any) -> None:
  """Checks replicas, machines and images of the parsed worker pools."""
  pools = message.worker_pool_specs
  if not pools or not pools[0].ByteSize():
    raise errors.UserError(
      "workerPoolSpecs[0] must describe the chief, the one machine every "
      "job has."
    )
  machines = sum(pool.replica_count for pool in pools)
  if machines > MAX_MACHINES:
    raise errors.UserError(
      f"The job asks for {machines} machines; a job gets at most "
      f"{MAX_MACHINES} here, a guard against typos (raise "
      "ctl.cloud.vertex_check.MAX_MACHINES for more)."
    )
  for index, pool in enumerate(pools):
    if not pool.ByteSize():
      continue  # Vertex AI takes {} as a placeholder for an unused pool.
    where = f"workerPoolSpecs[{index}]"
    if pool.replica_count < 1:
      raise errors.UserError(
        f"{where}.replicaCount must be at least 1, not {pool.replica_count}."
      )
    if index == 0 and pool.replica_count != 1:
      raise errors.UserError(
        f"{where} is the chief and must have replicaCount 1, not "
        f"{pool.replica_count}; put the other workers in workerPoolSpecs[1]."
      )
    _check_machine_type(pool.machine_spec.machine_type, f"{where}.machineSpec")
    if not (
      pool.container_spec.image_uri
      or pool.python_package_spec.executor_image_uri
    ):
      raise errors.UserError(f"{where}.containerSpec.imageUri is missing.")
    _check_accelerators(
      pool.machine_spec, f"{where}.machineSpec", aiplatform_v1
    )


def _check_accelerators(
  machine_spec: Any, where: str, aiplatform_v1: Any
) -> None:
  """Checks that accelerator type, count and machine type agree."""
  count = machine_spec.accelerator_count
  accelerator = aiplatform_v1.AcceleratorType(machine_spec.accelerator_type)
  if accelerator == aiplatform_v1.AcceleratorType.ACCELERATOR_TYPE_UNSPECIFIED:
    if count:
      raise errors.UserError(
        f"{where} asks for {count} accelerators but has no acceleratorType."
      )
    return
  if count < 1:
    raise errors.UserError(
      f"{where} has acceleratorType {accelerator.name} but acceleratorCount "
      f"{count}; set acceleratorCount to at least 1."
    )
  machine_type = machine_spec.machine_type
  series = _ACCELERATOR_MACHINES.get(accelerator.name, ())
  if series and not any(
    machine_type == s or machine_type.startswith(f"{s}-") for s in series
  ):
    raise errors.UserError(
      f"{where}: {accelerator.name} attaches to {', '.join(series)} machine "
      f"types, not {machine_type}."
    )
  gpus = gpus_in_machine_type(machine_type)
  if gpus is not None and count != gpus:
    raise errors.UserError(
      f"{where}: {machine_type} comes with {gpus} GPUs, so acceleratorCount "
      f"must be {gpus}, not {count}."
    )
  if accelerator.name in _N1_GPUS:
    _check_n1_gpus(accelerator.name, count, machine_type, where)


def _check_machine_type(machine_type: str, where: str) -> None:
  """Refuses a machine type that is missing or of no series Vertex AI has."""
  if not machine_type:
    raise errors.UserError(f"{where}.machineType is missing.")
  match = _MACHINE_TYPE.match(machine_type)
  if machine_type != "cloud-tpu" and not (
    match and match["series"] in _MACHINE_SERIES
  ):
    raise errors.UserError(
      f"{where}.machineType {machine_type!r} is not a machine type Vertex AI "
      "trains on; use SERIES-CLASS-SIZE such as n1-standard-8 or "
      f"a2-highgpu-1g, of the series {', '.join(_MACHINE_SERIES)}."
    )


def _check_n1_gpus(
  accelerator: str, count: int, machine_type: str, where: str
) -> None:
  """Checks the count of GPUs attached to an N1 machine, and its vCPUs."""
  most_vcpus = _N1_GPUS[accelerator]
  if count not in most_vcpus:
    *fewer, most = most_vcpus
    raise errors.UserError(
      f"{where}: {accelerator} comes {', '.join(map(str, fewer))} or {most} "
      f"to a machine, not {count}."
    )
  vcpus = int(_MACHINE_TYPE.match(machine_type)["size"])
  if vcpus > most_vcpus[count]:
    raise errors.UserError(
      f"{where}: {count} {accelerator} fits machines of at most "
      f"{most_vcpus[count]} vCPUs, not {machine_type}; ask for more GPUs "
      "or a smaller machine."
    )


def gpus_in_machine_type(machine_type: str) -> int | None:
  """The fixed GPU count of an accelerator-optimized machine type, or None."""
  match = _FIXED_GPU_MACHINE_TYPE.match(machine_type)
  if match:
    return int(match.group(1))
  family, _, size = machine_type.rpartition("-")
  return _G_SERIES_GPUS.get(family, {}).get(int(size) if size.isdigit() else 0)


def _unknown_field_sentence(
  key: str, where: str, descriptor: descriptor_lib.Descriptor
) -> str:
  """Says that `key` is not a field here, with the likely intended name."""
  snake = descriptor.fields_by_name.get(key)
  if snake is not None:
    return (
      f"{where} spells {key!r} in snake_case; gcloud only accepts "
      f"{snake.json_name!r}."
    )
  names = sorted(field.json_name for field in descriptor.fields)
  close = difflib.get_close_matches(key, names, n=1)
  if close:
    return f"{where} has no field {key!r}; did you mean {close[0]!r}?"
  known = ", ".join(names)
  return f"{where} has no field {key!r}; {descriptor.name} has {known}."


def _parse_error_sentence(error: json_format.ParseError) -> str:
  """Turns ParseDict's nested "Failed to parse X field: ..." into a sentence."""
  text = " ".join(str(error).split())
  fields = re.findall(r"Failed to parse (\w+) field: ", text)
  reason = re.sub(r"(Failed to parse \w+ field: )+", "", text).rstrip(".")
  where = ".".join(fields) or "The job spec"
  return f"{where} is invalid: {reason}."


def _kind(value: Any) -> str:
  """Names a YAML value's kind for error messages."""
  if value is None:
    return "empty"
  return {dict: "a mapping", list: "a list", str: "a string"}.get(
    type(value), type(value).__name__
  )


def import_aiplatform() -> Any:
  """Imports `google.cloud.aiplatform_v1`, or says how to install it."""
  try:
    from google.cloud import aiplatform_v1  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise errors.UserError(
      "Vertex AI support needs google-cloud-aiplatform; install the vertex "
      "extra: pip install '.[vertex]'."
    ) from None
  return aiplatform_v1
