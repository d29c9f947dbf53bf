"""Checks a wheel's top-level names: none may be a generic one.

A top-level package installed into site-packages under a name another
project on PyPI uses (`trainer`, `tests`, `utils`, ...) silently replaces
that project's, or is replaced by it. Reads the wheel's `top_level.txt` and
the first path part of every RECORD entry; prints each name and exits 0, or
one sentence naming the generic ones and exits 1 (2 for a path that is not
a wheel).

  python scripts/wheel_names.py dist/ctl_train_loop-0.1.0-py3-none-any.whl
"""

import sys
import zipfile

# Names other projects on PyPI install (or that are anyone's): `trainer` is
# the reference trainer's folder, shipped here as `ctl_trainer`.
GENERIC = frozenset(
  {
    "trainer",
    "tests",
    "test",
    "examples",
    "benchmarks",
    "scripts",
    "configs",
    "docs",
    "utils",
    "util",
    "common",
    "src",
    "lib",
    "data",
    "models",
    "model",
  }
)


def top_level_names(wheel: str) -> set[str]:
  """The wheel's top-level names, from top_level.txt and RECORD."""
  with zipfile.ZipFile(wheel) as archive:
    names = set()
    for path in archive.namelist():
      if path.endswith(".dist-info/top_level.txt"):
        names |= set(archive.read(path).decode().split())
      elif path.endswith(".dist-info/RECORD"):
        for line in archive.read(path).decode().splitlines():
          first = line.split(",", 1)[0].split("/", 1)[0]
          if first and not first.endswith((".dist-info", ".data")):
            names.add(first.removesuffix(".py"))
  return names


def main(argv: list[str]) -> int:
  if len(argv) != 2 or not zipfile.is_zipfile(argv[1]):
    print(f"error: give one wheel file, not {argv[1:]}.", file=sys.stderr)
    return 2
  names = top_level_names(argv[1])
  generic = sorted(names & GENERIC)
  if generic:
    print(
      f"error: the wheel installs generic top-level names {generic}.",
      file=sys.stderr,
    )
    return 1
  print("top-level names:", *sorted(names))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
