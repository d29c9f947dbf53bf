"""What the job-spec generators `ctl-vertex` and `ctl-k8s` share.

Both take their own flags, then `--` and the trainer's command line; both
print the spec they built as YAML (what `gcloud --config` and `kubectl apply
-f` read) or JSON; both report a bad value as one `error: ...` sentence and
exit 2.
"""

import argparse
from collections.abc import Callable, Mapping, Sequence
import inspect
import json
import sys
from typing import Any

import yaml

from ctl import errors


def split_trainer_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """Splits a command line at the first `--` into (own flags, trainer args)."""
  argv = list(argv)
  if "--" not in argv:
    return argv, []
  split = argv.index("--")
  return argv[:split], argv[split + 1 :]


def from_args(build: Callable, args: argparse.Namespace, **values) -> Any:
  """Calls `build` with each keyword it takes from the flag of that name.

  The flags of both generators are named after the keywords of what builds
  the spec, so neither spells out `name=args.name` for each; `values` gives
  the keywords that are not flags (the trainer arguments), and a keyword
  with neither keeps its default.
  """
  parameters = inspect.signature(build).parameters
  flags = {name: getattr(args, name) for name in parameters if name in args}
  return build(**(flags | values))


def format_spec(spec: Mapping[str, Any], output_format: str) -> str:
  """Renders a spec as "yaml" (block style, keys in order) or "json" text."""
  if output_format == "json":
    return json.dumps(spec, indent=2) + "\n"
  return yaml.safe_dump(spec, sort_keys=False)


def run(action: Callable[[], str]) -> int:
  """Prints what `action` returns; a `UserError` becomes one line and exit 2.

  Args:
    action: Builds, checks and renders (or submits) the spec.

  Returns:
    The exit code: 0, or `errors.USER_ERROR_EXIT_CODE`.
  """
  try:
    text = action()
  except errors.UserError as e:
    print(f"error: {e}", file=sys.stderr)
    return errors.USER_ERROR_EXIT_CODE
  print(text, end="" if text.endswith("\n") else "\n")
  return 0
