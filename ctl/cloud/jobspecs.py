"""What the job-spec generators `ctl-vertex` and `ctl-k8s` share.

Both take their own flags, then `--` and the trainer's command line; both
print the spec they built as YAML (what `gcloud --config` and `kubectl apply
-f` read) or JSON; both report a bad value as one `error: ...` sentence and
exit 2.
"""

from collections.abc import Callable, Mapping, Sequence
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


def format_spec(spec: Mapping[str, Any], output_format: str) -> str:
  """Renders a spec as "yaml" (block style, keys in order) or "json" text."""
  if output_format == "json":
    return json.dumps(spec, indent=2) + "\n"
  return yaml.safe_dump(spec, sort_keys=False)


def run(action: Callable[[], str | int]) -> int:
  """Prints what `action` returns; a `UserError` becomes one line and exit 2.

  Args:
    action: Builds, checks and renders (or submits) the spec and returns the
      text to print, or having printed what it had to say, an exit code (how
      a followed job ended).

  Returns:
    The exit code: 0, the one `action` returned, or
    `errors.USER_ERROR_EXIT_CODE`.
  """
  try:
    text = action()
  except errors.UserError as e:
    print(f"error: {e}", file=sys.stderr)
    return errors.USER_ERROR_EXIT_CODE
  if isinstance(text, int):
    return text
  print(text, end="" if text.endswith("\n") else "\n")
  return 0
