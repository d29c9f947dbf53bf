"""Which device to benchmark on, and which precisions it runs fast.

The same scripts run on a CPU-only machine and on a GPU machine unchanged:
`--device=auto` takes the first visible GPU, else the CPU. A precision that
the device has no fast kernels for is skipped with the reason, which goes into
the report instead of a slow, misleading number.
"""

import dataclasses
import os
import platform

import tensorflow as tf

from ctl.errors import UserError

PRECISIONS = ("none", "bf16", "fp16")
# Keras mixed-precision policy for each --precision value.
POLICIES = {
  "none": "float32",
  "bf16": "mixed_bfloat16",
  "fp16": "mixed_float16",
}
# The dtype the matmul-peak measurement uses for each precision.
MATMUL_DTYPES = {"none": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}


@dataclasses.dataclass(frozen=True)
class Device:
  """The device a benchmark runs on.

  Attributes:
    kind: "cpu" or "gpu".
    name: the TensorFlow device string, e.g. "/gpu:0".
    description: the processor's model name, for the report.
    cpu_flags: instruction-set flags of the CPU (empty where unknown).
    compute_capability: (major, minor) of the GPU, or None.
  """

  kind: str
  name: str
  description: str
  cpu_flags: frozenset = frozenset()
  compute_capability: tuple[int, int] | None = None

  def supports(self, precision: str) -> tuple[bool, str]:
    """Whether `precision` has fast kernels here, and if not, why not."""
    if precision == "none":
      return True, ""
    if self.kind == "gpu":
      major = (self.compute_capability or (0, 0))[0]
      if precision == "bf16" and major < 8:
        return False, (
          f"bf16 needs a GPU of compute capability 8.0 or more; "
          f"this one is {self.compute_capability}."
        )
      if precision == "fp16" and major < 7:
        return False, (
          f"fp16 has no tensor cores below compute capability "
          f"7.0; this GPU is {self.compute_capability}."
        )
      return True, ""
    if precision == "fp16":
      return False, (
        "fp16 has no fast CPU kernels in TensorFlow (it is meant "
        "for GPUs, with loss scaling); skipped on the CPU."
      )
    if self.cpu_flags & {"avx512_bf16", "amx_bf16"}:
      return True, ""
    return False, (
      "this CPU has no bf16 instructions (avx512_bf16 or "
      "amx_bf16), so bf16 would be emulated and slow; skipped."
    )

  def as_dict(self) -> dict:
    return {
      "kind": self.kind,
      "name": self.name,
      "description": self.description,
      "compute_capability": self.compute_capability,
    }


def resolve(choice: str = "auto") -> Device:
  """The device for `--device` ("auto", "cpu" or "gpu").

  Raises:
    UserError: "gpu" was asked for and none is visible.
  """
  gpus = tf.config.list_physical_devices("GPU")
  if choice == "gpu" and not gpus:
    raise UserError("--device=gpu but TensorFlow sees no GPU.")
  if choice in ("auto", "gpu") and gpus:
    details = tf.config.experimental.get_device_details(gpus[0])
    return Device(
      kind="gpu",
      name="/gpu:0",
      description=details.get("device_name", "GPU"),
      compute_capability=details.get("compute_capability"),
    )
  model, cpu_flags = _cpu_info()
  return Device(
    kind="cpu",
    name="/cpu:0",
    description=f"{model}, {os.cpu_count()} logical cores",
    cpu_flags=cpu_flags,
  )


def _cpu_info() -> tuple[str, frozenset]:
  """The CPU's model name and flags from /proc/cpuinfo (Linux), if readable."""
  model, cpu_flags = platform.processor() or platform.machine(), frozenset()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name":
          model = value.strip()
        elif key == "flags" and not cpu_flags:
          cpu_flags = frozenset(value.split())
  except OSError:
    pass
  return model, cpu_flags
