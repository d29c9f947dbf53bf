"""No function in the project's code (`ctl/`, `trainer/`, `benchmarks/`,
`scripts/`, `examples/`) is over 60 lines (the house rule).

Read statically from the source, docstring and signature included, like
tests/test_import_graph.py: a function that grows past the limit fails here
and is split into named steps instead.
"""

import ast
import os

from tests.conftest import REPO

LIMIT = 60


_PACKAGES = ("ctl", "trainer", "benchmarks", "scripts", "examples")


def _long_functions(limit: int, packages=_PACKAGES) -> dict[str, int]:
  """{"path:name": lines} of every function over `limit` lines."""
  found = {}
  for package in packages:
    for folder, _, files in os.walk(os.path.join(REPO, package)):
      for name in sorted(f for f in files if f.endswith(".py")):
        path = os.path.join(folder, name)
        with open(path) as f:
          tree = ast.parse(f.read())
        for node in ast.walk(tree):
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
              found[f"{os.path.relpath(path, REPO)}:{node.name}"] = lines
  return found


def test_no_function_is_over_60_lines():
  assert not _long_functions(LIMIT)


def test_the_check_sees_long_functions():
  """It measures whole functions: half the limit finds some."""
  assert _long_functions(LIMIT // 2)
