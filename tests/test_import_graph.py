"""The layers hold: `ctl/` never imports `trainer/`, no modules import each
other in a loop, and the folders of `ctl/` and of `benchmarks/` import only
their own layer or lower (docs/design.md, "Layers": imports only point down).
The maps hold too: each folder's `__init__` lists its modules lowest first,
`ctl` itself offers every exception and exit code of ctl.errors, every
module has its test file (docs/design.md, "Style"), only `ctl/platform/`
reads a platform's variables (docs/design.md, "Where a new platform goes"),
and docs/framework.md's module map names every folder in the layers' order.

Read statically from the source (every import statement, also those inside
functions), so the test needs nothing installed and cannot be fooled by an
import that happens to run late.
"""

import ast
import os
import re

import pytest

from tests.conftest import REPO


def _modules(package: str) -> dict[str, str]:
  """{dotted module name: file} of every module under `package`."""
  found = {}
  for folder, _, files in os.walk(os.path.join(REPO, package)):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        dotted = os.path.relpath(path, REPO)[: -len(".py")].replace(os.sep, ".")
        found[dotted.removesuffix(".__init__")] = path
  return found


def _imports(path: str) -> set[str]:
  """The dotted names that the module at `path` imports; a relative import
  (the trainer's own: it is installed as ctl_trainer) is resolved against
  the module's package."""
  with open(path) as f:
    tree = ast.parse(f.read())
  package = os.path.relpath(os.path.dirname(path), REPO).replace(os.sep, ".")
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = package.rsplit(".", node.level - 1)[0] if node.level else ""
      module = ".".join(p for p in (base, node.module) if p)
      names.add(module)
      names.update(f"{module}.{alias.name}" for alias in node.names)
  return names


def _graph(packages=("ctl", "trainer", "benchmarks")) -> dict[str, set[str]]:
  """Module -> the project modules it imports (itself and its package's
  `__init__` left out)."""
  modules = {}
  for package in packages:
    modules.update(_modules(package))
  return {
    name: {
      target
      for target in _imports(path)
      if target in modules and target != name and target != name.split(".")[0]
    }
    for name, path in modules.items()
  }


def test_ctl_never_imports_trainer():
  upward = {
    (name, target)
    for name, targets in _graph().items()
    if name.startswith("ctl")
    for target in targets
    if target.startswith("trainer")
  }
  assert not upward


def test_no_module_imports_itself_through_others():
  graph, cycles = _graph(), []

  def visit(name, path):
    if name in path:
      cycles.append(path[path.index(name) :] + [name])
      return
    if name in done:
      return
    for target in sorted(graph[name]):
      visit(target, path + [name])
    done.add(name)

  done = set()
  for name in sorted(graph):
    visit(name, [])
  assert not cycles


def test_the_check_sees_imports():
  """The graph is not empty: `ctl.train.controller` imports `ctl.train.parts`."""
  assert "ctl.train.parts" in _graph()["ctl.train.controller"]


# The folders of ctl/, lowest first (docs/design.md, "Layers"): a module may
# import its own folder and the folders below it, never one above.
LAYERS = (
  ("ctl.errors", "ctl.env", "ctl.processes", "ctl.teardown"),
  ("ctl.platform",),
  ("ctl.io",),
  ("ctl.distributed",),
  ("ctl.telemetry",),
  ("ctl.data",),
  ("ctl.resilience",),
  ("ctl.checkpoint",),
  ("ctl.train",),
  ("ctl.launch",),
  ("ctl.cloud",),
  ("ctl", "ctl.report", "ctl.testing"),
)

# The folders of benchmarks/, lowest first, in the same sense.
BENCHMARK_LAYERS = (
  ("benchmarks.harness",),
  ("benchmarks.workloads",),
  ("benchmarks.speed", "benchmarks.recovery", "benchmarks.cluster"),
  ("benchmarks", "benchmarks.run_all"),
)
# Each package whose folders are layered, with its layers.
LAYERED = {"ctl": LAYERS, "benchmarks": BENCHMARK_LAYERS}


def _layer(module: str, layers=LAYERS) -> int:
  """The index in `layers` of the folder (or top-level module) `module` is
  in."""
  best = None
  for index, prefixes in enumerate(layers):
    for prefix in prefixes:
      if module == prefix or module.startswith(prefix + "."):
        if best is None or len(prefix) > best[1]:
          best = (index, len(prefix))
  assert best is not None, f"{module} is in no layer of LAYERS"
  return best[0]


@pytest.mark.parametrize("package", sorted(LAYERED))
def test_folders_import_only_their_own_layer_or_lower(package):
  layers = LAYERED[package]
  upward = sorted(
    f"{name} -> {target}"
    for name, targets in _graph((package,)).items()
    for target in targets
    if _layer(target, layers) > _layer(name, layers)
  )
  assert not upward


@pytest.mark.parametrize("package", sorted(LAYERED))
def test_every_module_is_in_a_layer(package):
  for name in _graph((package,)):
    _layer(name, LAYERED[package])


@pytest.mark.parametrize("package", sorted(LAYERED))
def test_no_folder_holds_more_than_twelve_modules(package):
  crowded = {}
  for folder, _, files in os.walk(os.path.join(REPO, package)):
    modules = [f for f in files if f.endswith(".py") and f[0] != "_"]
    if len(modules) > 12:
      crowded[os.path.relpath(folder, REPO)] = len(modules)
  assert not crowded


@pytest.mark.parametrize("package", sorted(LAYERED))
def test_every_folder_face_names_each_of_its_modules(package):
  """Each folder's `__init__` docstring lists its modules (the module map)."""
  unlisted = []
  for folder, _, files in os.walk(os.path.join(REPO, package)):
    face = os.path.join(folder, "__init__.py")
    if not os.path.exists(face) or folder.endswith(package):
      continue
    with open(face) as f:
      listed = ast.get_docstring(ast.parse(f.read())) or ""
    unlisted += [
      os.path.join(os.path.relpath(folder, REPO), name)
      for name in files
      if name.endswith(".py")
      and not name.startswith("__")
      and f"  {name[:-3]}:" not in listed
    ]
  assert not unlisted


def test_the_trainer_takes_ctls_exceptions_from_the_ctl_package():
  """A user of ctl (the reference trainer is one) finds every exception an
  entry point must catch, and every exit code, in `ctl` itself."""
  import ctl  # pylint: disable=g-import-not-at-top
  from ctl import errors  # pylint: disable=g-import-not-at-top

  public = [
    name
    for name, value in vars(errors).items()
    if not name.startswith("_")
    and (
      name.endswith("_EXIT_CODE")
      or isinstance(value, type)
      and issubclass(value, Exception)
    )
  ]
  assert [name for name in public if name not in ctl.__all__] == []
  inward = {
    (name, target)
    for name, targets in _graph(("ctl", "trainer")).items()
    if name.startswith("trainer")
    for target in targets
    if target.startswith("ctl.errors")
  }
  assert not inward


def _listed(face: str) -> list[str]:
  """The modules a folder's `__init__` docstring lists, in its order."""
  with open(face) as f:
    listed = ast.get_docstring(ast.parse(f.read())) or ""
  return re.findall(r"^  (\w+):", listed, re.M)


@pytest.mark.parametrize("package", sorted(LAYERED))
def test_every_folder_face_lists_its_modules_lowest_first(package):
  """No folder's `__init__` lists a module before one it imports."""
  graph, upward = _graph((package,)), []
  for folder, _, _ in os.walk(os.path.join(REPO, package)):
    face = os.path.join(folder, "__init__.py")
    if not os.path.exists(face):
      continue
    package = os.path.relpath(folder, REPO).replace(os.sep, ".")
    order = [f"{package}.{name}" for name in _listed(face)]
    upward += [
      f"{name} imports {target}, listed after it"
      for index, name in enumerate(order)
      for target in graph.get(name, ())
      if target in order[index + 1 :]
    ]
  assert not upward


# Modules whose tests are the tests that use them, not a file of their own:
# ctl.testing is the tests' harness, and every test below runs it.
NO_TEST_FILE = {
  "ctl/testing/clock.py": "its clock steps are tests/test_wall_clock.py's",
  "ctl/testing/events.py": "every test that follows a run by its events",
  "ctl/testing/gcs_emulator.py": "tests/test_storage.py, test_cloud_storage_runs",
  "ctl/testing/run_files.py": "every test that reads a run's summary",
}


def test_every_ctl_module_has_a_test_file_named_after_it():
  """docs/design.md: `ctl/x/m.py` is tested in `tests/test_m.py`."""
  missing = sorted(
    os.path.relpath(path, REPO)
    for name, path in _modules("ctl").items()
    if not path.endswith("__init__.py")
    and not path.endswith("__main__.py")
    and not os.path.exists(
      os.path.join(REPO, "tests", f"test_{name.rpartition('.')[2]}.py")
    )
  )
  assert missing == sorted(NO_TEST_FILE)


def _platform_variables() -> set[str]:
  """The environment variables `ctl/platform/` reads: the upper-case string
  constants of its modules (TF_CONFIG, CLUSTER_SPEC, AIP_MODEL_DIR, ...)."""
  names = set()
  for path in _modules(os.path.join("ctl", "platform")).values():
    with open(path) as f:
      for node in ast.walk(ast.parse(f.read())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
          if re.fullmatch(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+", node.value):
            names.add(node.value)
  return names


def _environment_reads(path: str) -> set[str]:
  """The constant names the module at `path` reads from the environment:
  `os.environ[X]` loaded, `os.environ.get(X)`, `os.getenv(X)`, `X in
  os.environ` (a write, as the launcher sets TF_CONFIG for its workers, is
  not a read)."""

  def environ(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"

  with open(path) as f:
    tree = ast.parse(f.read())
  read = set()
  for node in ast.walk(tree):
    key = None
    if isinstance(node, ast.Subscript) and environ(node.value):
      key = node.slice if isinstance(node.ctx, ast.Load) else None
    elif isinstance(node, ast.Call) and node.args:
      func = node.func
      getter = isinstance(func, ast.Attribute) and (
        (func.attr == "get" and environ(func.value)) or func.attr == "getenv"
      )
      key = node.args[0] if getter else None
    elif isinstance(node, ast.Compare) and any(
      environ(c) for c in node.comparators
    ):
      key = node.left
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
      read.add(key.value)
  return read


def test_only_ctl_platform_reads_a_platforms_variables():
  platform = _platform_variables()
  assert {"TF_CONFIG", "CLUSTER_SPEC", "AIP_MODEL_DIR"} <= platform
  readers = {
    f"{module}: {name}"
    for package in ("ctl", "trainer")
    for module, path in _modules(package).items()
    if not module.startswith("ctl.platform")
    for name in sorted(_environment_reads(path) & platform)
  }
  assert readers == set()


def test_the_platform_check_sees_reads(tmp_path):
  module = tmp_path / "reader.py"
  module.write_text(
    "import os\n"
    "a = os.environ['TF_CONFIG']\n"
    "b = os.environ.get('CLUSTER_SPEC', '')\n"
    "c = os.getenv('AIP_MODEL_DIR')\n"
    "d = 'AIP_CHECKPOINT_DIR' in os.environ\n"
    "env = dict(os.environ)\n"
    "os.environ['CLOUD_ML_JOB_ID'] = 'x'\n"
  )
  assert _environment_reads(str(module)) == {
    "TF_CONFIG",
    "CLUSTER_SPEC",
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
  }


def test_the_module_map_lists_every_folder_of_ctl_highest_first():
  """docs/framework.md's module map names each folder of ctl/ once, in the
  order of the layers, highest first, as the page says."""
  with open(os.path.join(REPO, "docs", "framework.md")) as f:
    block = f.read().split("## Module map", 1)[1].split("```")[1]
  listed = re.findall(r"^ctl/(\w+)/", block, re.M)
  folders = [
    name.split(".")[1]
    for layer in reversed(LAYERS)
    for name in layer
    if name != "ctl" and os.path.isdir(os.path.join(REPO, *name.split(".")))
  ]
  assert listed == folders
