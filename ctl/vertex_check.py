"""Checks a Vertex AI CustomJobSpec offline, the way gcloud and Vertex AI would.

A typo in a spec, an accelerator that does not exist or a chief pool with two
replicas is otherwise found only after the job is queued, or never. Here the
spec (camelCase, as `gcloud ai custom-jobs create --config=FILE` reads it) is
parsed into the protos of `google.cloud.aiplatform_v1`, and what the protos
allow but Vertex AI refuses is checked by field path, each problem in one
sentence. `ctl.vertex` builds specs and submits them; this module only reads.
"""

from collections.abc import Mapping
import difflib
import re
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor as descriptor_lib
from google.protobuf import json_format
import yaml

from ctl import errors
from ctl import reduction_server

if TYPE_CHECKING:
  from google.cloud import aiplatform_v1

# Accelerator-optimized machine types carry their GPU count in the name
# (a2-highgpu-1g, a3-highgpu-8g, a4-highgpu-8g) and take exactly that many.
_FIXED_GPU_MACHINE_TYPE = re.compile(r"^a\d+\w*-\w+-(\d+)g$")


def validate_job_spec(spec: Any) -> "aiplatform_v1.CustomJobSpec":
  """Checks a camelCase CustomJobSpec the way gcloud and Vertex AI would.

  Beyond parsing into the library's proto (field names, value types, enum
  names), it rejects snake_case keys (gcloud does), a chief pool without
  exactly one replica, pools without replicas, machine type or image,
  accelerator counts without a type and the reverse, GPU counts that do not
  match an accelerator-optimized machine type, and a non-gs:// output
  directory.

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
  if message.HasField("base_output_directory"):
    prefix = message.base_output_directory.output_uri_prefix
    if not prefix.startswith("gs://"):
      raise errors.UserError(
        f"baseOutputDirectory.outputUriPrefix must be a gs:// URI, not "
        f"{prefix!r}."
      )
  return aiplatform_v1.CustomJobSpec.wrap(message)


def load_job_config(path: str) -> "aiplatform_v1.CustomJobSpec":
  """Loads and validates a `gcloud ai custom-jobs create --config` file.

  Args:
    path: A YAML (or JSON) file holding a camelCase CustomJobSpec.

  Returns:
    The parsed `google.cloud.aiplatform_v1.CustomJobSpec`.

  Raises:
    errors.UserError: If the file cannot be read, is not YAML, or holds an
      invalid spec; the sentence starts with the path.
  """
  try:
    with open(path, encoding="utf-8") as f:
      spec = yaml.safe_load(f)
  except OSError as e:
    raise errors.UserError(
      f"Cannot read the job config {path}: {e.strerror}."
    ) from None
  except yaml.YAMLError as e:
    problem = " ".join(str(e).split())
    raise errors.UserError(f"{path} is not valid YAML: {problem}.") from None
  try:
    return validate_job_spec(spec)
  except errors.UserError as e:
    raise errors.UserError(f"{path}: {e}") from None


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
    if not pool.machine_spec.machine_type:
      raise errors.UserError(f"{where}.machineSpec.machineType is missing.")
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
  gpus = gpus_in_machine_type(machine_type)
  if gpus is not None and count != gpus:
    raise errors.UserError(
      f"{where}: {machine_type} comes with {gpus} GPUs, so acceleratorCount "
      f"must be {gpus}, not {count}."
    )


def gpus_in_machine_type(machine_type: str) -> int | None:
  """The fixed GPU count of an accelerator-optimized machine type, or None."""
  match = _FIXED_GPU_MACHINE_TYPE.match(machine_type)
  return int(match.group(1)) if match else None


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
