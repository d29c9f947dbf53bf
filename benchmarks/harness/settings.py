"""A benchmark Config field that is also a flag of its app.

A benchmark's `Config` dataclass is the one place each of its settings is
declared: a field made with `flag(default, help)` carries its default, its
type (the field's annotation) and its help text, and `cli.define_flags`
turns it into the app's absl flag. This module has no absl flags of its own,
so the `*_lib` modules import it without defining any.
"""

from collections.abc import Sequence
import dataclasses
from typing import Any


def flag(
  default: Any,
  help: str,  # noqa: A002 (absl's name for it)
  *,
  choices: Sequence[str] | None = None,
  name: str | None = None,
) -> Any:
  """A Config field that `cli.define_flags` defines as a flag.

  Args:
    default: the field's default, also the flag's.
    help: the flag's help text.
    choices: the values an enum flag allows.
    name: the flag's full name when it is not the app's prefix + the field's
      name (e.g. `matmul_size` for `peak_size`).
  """
  metadata = {"help": help}
  if choices is not None:
    metadata["choices"] = tuple(choices)
  if name is not None:
    metadata["flag"] = name
  return dataclasses.field(default=default, metadata=metadata)


def flag_name(field: dataclasses.Field, prefix: str = "") -> str | None:
  """The name of a `flag` field's flag in an app of this prefix, else None."""
  if "help" not in field.metadata:
    return None
  return field.metadata.get("flag", prefix + field.name)


@dataclasses.dataclass(frozen=True)
class Rounds:
  """What every timed app's Config has: the measured rounds and the seconds
  the app may take, read from the flags all apps share (cli.py's --repeats
  and --time_budget_secs; see benchmarks/harness/budget.py)."""

  repeats: int = 3
  time_budget_secs: float = 0.0
