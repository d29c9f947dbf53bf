"""Variant specs: how the throughput flags name a way to train.

A spec is `kind[:steps][+modifier...]`:

  engine:1        ctl.train.loop.TrainLoop, 1 step per call
  engine:N        the same, --steps_per_loop steps per call
  bare            a bare tf.function GradientTape step, called per step
  bare:N          the same step in a tf.range loop of N steps per call
  fit:1, fit:N    Keras model.fit with steps_per_execution 1 or N
  engine:N+bf16   modifiers: bf16, fp16 (precision), xla
  engine:1+noacc  the engine without train accuracy (train_accuracy=False);
                  bare+noacc, bare:N+noacc: the bare step without it

Ratios are `spec/spec` and targets `spec/spec>=threshold`, e.g.
`engine:N/bare>=0.98`.
"""

import dataclasses
import re

from ctl.errors import UserError

KINDS = ("engine", "bare", "fit")
_MODIFIERS = ("bf16", "fp16", "xla", "noacc")
_TARGET = re.compile(r"^(?P<ratio>[^>]+)>=(?P<threshold>[0-9.]+)$")


@dataclasses.dataclass(frozen=True)
class Variant:
  """One way to train, resolved against the run's flags.

  Attributes:
    kind: one of KINDS.
    steps_per_call: steps per host call (engine and bare: steps_per_loop;
      fit: steps_per_execution).
    precision: "none", "bf16" or "fp16".
    xla: whether the forward and backward pass are compiled with XLA.
    train_accuracy: whether the engine or the bare step counts correct
      predictions (fit always does).
  """

  kind: str
  steps_per_call: int
  precision: str
  xla: bool
  train_accuracy: bool = True

  @property
  def name(self) -> str:
    label = {
      "engine": f"engine spl={self.steps_per_call}",
      "bare": (
        "bare step"
        if self.steps_per_call == 1
        else f"bare loop spl={self.steps_per_call}"
      ),
      "fit": f"fit spe={self.steps_per_call}",
    }[self.kind]
    if self.precision != "none":
      label += f" +{self.precision}"
    if self.xla:
      label += " +xla"
    if not self.train_accuracy:
      label += " no accuracy"
    return label


def parse(
  spec: str, *, steps_per_loop: int, precision: str, xla: bool
) -> Variant:
  """Resolves a spec; `precision` and `xla` are the run's defaults.

  Raises:
    UserError: a malformed spec, with the accepted form.
  """
  head, *modifiers = spec.strip().split("+")
  kind, _, steps = head.partition(":")
  unknown = [m for m in modifiers if m not in _MODIFIERS]
  if kind not in KINDS or unknown or (kind == "fit" and "noacc" in modifiers):
    raise UserError(
      f"Bad variant {spec!r}: use engine:K, bare[:K] or fit:K (K a number "
      f"or N for --steps_per_loop), then optional +bf16, +fp16 or +xla "
      "(and +noacc for engine and bare)."
    )
  if kind == "bare" and not steps:
    steps_per_call = 1
  elif steps in ("", "N"):
    steps_per_call = steps_per_loop
  elif steps.isdigit() and int(steps) > 0:
    steps_per_call = int(steps)
  else:
    raise UserError(f"Bad steps {steps!r} in variant {spec!r}.")
  for modifier in modifiers:
    if modifier in ("bf16", "fp16"):
      precision = modifier
  return Variant(
    kind=kind,
    steps_per_call=steps_per_call,
    precision=precision,
    xla=xla or "xla" in modifiers,
    train_accuracy="noacc" not in modifiers,
  )


def parse_ratio(spec: str, **defaults) -> tuple[Variant, Variant]:
  """`a/b` -> (variant a, variant b)."""
  parts = spec.split("/")
  if len(parts) != 2:
    raise UserError(
      f"Bad ratio {spec!r}: use numerator/denominator, e.g. engine:N/bare."
    )
  return parse(parts[0], **defaults), parse(parts[1], **defaults)


def parse_target(spec: str, **defaults) -> tuple[Variant, Variant, float]:
  """`a/b>=t` -> (variant a, variant b, t)."""
  match = _TARGET.match(spec.replace(" ", ""))
  if not match:
    raise UserError(
      f"Bad target {spec!r}: use numerator/denominator>=x, "
      "e.g. engine:N/bare>=0.98."
    )
  numerator, denominator = parse_ratio(match["ratio"], **defaults)
  return numerator, denominator, float(match["threshold"])
