"""What README.md and docs/*.md name exists in the code (the link test's
sibling, tests/test_readme.py).

A page that names a flag, a file, a module, a make target or an exit code
makes a claim a reader acts on; these tests hold each kind to the code:

- every `--flag` is defined: by the trainer (absl), by one of ctl's command
  lines (argparse, their `_parser()`), by a benchmark or script, or it is
  one of the other programs' flags the pages show (EXTERNAL_FLAGS);
- every repository path (`ctl/...py`, `configs/...`) is a file or folder,
  every `python -m x.y` of this repository a module, and every `ctl.x` a
  module or a name of the `ctl` package (a part in capitals, as in
  `python -m benchmarks.speed.X`, stands for any);
- every `make X` is a target of the Makefile;
- every `pip install` of this project (`'<name>[extra]'`, `.[extra]`), in
  the pages, the Makefile and the code's messages, names setup.cfg's
  distribution and extras (the name `ctl` on the public index is another
  project);
- the README's exit-code table names only codes that each tool its heading
  names can exit with, read from the tool's modules (their `*_EXIT_CODE`
  constants, the literals they exit with, the ctl exceptions they catch),
  and every "exit N" of the pages is a code some tool exits with.
"""

import ast
import configparser
import glob
import importlib
import os
import pathlib
import re
import signal

from absl import flags as absl_flags

from ctl import errors
from tests.conftest import REPO
from tests.test_import_graph import _graph
from tests.test_import_graph import _modules

# Flags of other programs that the pages show in their commands.
EXTERNAL_FLAGS = {
  # pip, python -m venv, pytest (with xdist), ruff
  "no-deps",
  "only-binary",
  "python-version",
  "dist",
  "no-loadscope-reorder",
  "check",
  # docker / podman build and run
  "build-arg",
  "rm",
  "user",
  # gcloud
  "config",
  "display-name",
  "location",
  "repository-format",
  # tfds build (docs/data.md: preparing a dataset)
  "dataset_version_dir",
  "file_format",
  "out_file_format",
  # debootstrap (docs/container.md), kubectl apply (docs/gke.md)
  "variant",
  "validate",
  # gcloud container clusters create (docs/gke.md)
  "accelerator",
  "kubernetes_version",
  "spot",
  # TensorFlow's TF_XLA_FLAGS (docs/goodput.md: the persistent XLA cache)
  "tf_xla_persistent_cache_directory",
  "tf_xla_persistent_cache_device_types",
  "tf_xla_persistent_cache_read_only",
}
# Every Python process can end with these: done, and an uncaught exception.
ALWAYS = {0, 1}
# What a ctl exception caught by an entry point exits with (`e.exit_code`):
# 128 + SIGINT or SIGTERM; a lost lease, or a vanished one (ctl.errors).
_CAUGHT = {
  "Preempted": {128 + signal.SIGINT, errors.PREEMPTED_EXIT_CODE},
  "LeaseLost": {
    errors.LEASE_LOST_EXIT_CODE,
    errors.CANNOT_WRITE_EXIT_CODE,
    errors.USER_ERROR_EXIT_CODE,
  },
}
# What `ctl.exit_code(e)` gives an entry point for each of ctl's exceptions.
_EXIT_CODE_GIVES = {
  errors.exit_code(e)
  for e in (
    errors.UserError(),
    errors.Preempted(0),
    errors.Preempted(0, signal.SIGINT),
    errors.TrainingDiverged(),
    errors.Stalled(),
    errors.CannotWrite(),
    errors.LeaseLost(),
    errors.LeaseVanished("", directory_gone=True),
    errors.LeaseVanished("", directory_gone=False),
    errors.PeerLost(),
  )
}
# `ctl-launch` returns its workers' codes (ctl.launch.supervisor).
RELAYS = {"ctl-launch": "ctl-train"}
_FENCE = re.compile(r"^```.*?^```$", re.S | re.M)
_TOP = ("ctl", "trainer", "tests", "examples", "scripts", "benchmarks")
# A repository path: a file with its extension (a `{a,b}` or `*` in it is a
# shell pattern), or a folder ending in `/`.
_PATH = (
  r"(?<![\w/.:-])((?:ctl|trainer|tests|examples|scripts|benchmarks|configs|"
  r"docs)/[\w./{},*-]*(?:\.\w+|/))"
)


def _pages() -> list[pathlib.Path]:
  root = pathlib.Path(REPO)
  return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _named(pattern: str, pages: list[pathlib.Path]) -> list[tuple[str, str]]:
  """(page, match) of each match of `pattern`'s group 1 on every page."""
  return [
    (page.name, match)
    for page in pages
    for match in sorted(set(re.findall(pattern, page.read_text(), re.M)))
  ]


def _python_files():
  for folder, dirs, files in os.walk(REPO):
    dirs[:] = [d for d in dirs if d in _TOP or folder != REPO]
    yield from (os.path.join(folder, f) for f in files if f.endswith(".py"))


def _static_flags() -> set[str]:
  """Flags the repository's Python defines by name: argparse's
  `add_argument("--x")`, absl's `DEFINE_*("x")`, benchmark settings
  (`x: int = settings.flag(...)`, or its `name=`)."""
  found = set()
  for path in _python_files():
    for node in ast.walk(ast.parse(pathlib.Path(path).read_text())):
      if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call):
        call = node.value
        if getattr(call.func, "attr", "") == "flag":
          found.add(node.target.id)
          found.update(k.value.value for k in call.keywords if k.arg == "name")
      if not isinstance(node, ast.Call) or not node.args:
        continue
      name = getattr(node.func, "attr", getattr(node.func, "id", ""))
      first = node.args[0]
      if not isinstance(first, ast.Constant) or not isinstance(
        first.value, str
      ):
        continue
      if name == "add_argument" and first.value.startswith("--"):
        found.add(first.value[2:])
      elif name.startswith("DEFINE"):
        found.update({first.value, f"no{first.value}"})
  return found


def _tool_flags() -> dict[str, set[str]]:
  """{tool: its flags, as its command line parses them}."""
  importlib.import_module("trainer.task")  # Defines the trainer's flags.
  trainer = set(absl_flags.FLAGS)
  trainer |= {f"no{n}" for n in trainer if absl_flags.FLAGS[n].boolean}
  found = {"ctl-train": trainer | {"flagfile", "help", "helpfull", "helpshort"}}
  for tool, module in _TOOLS.items():
    parser = importlib.import_module(module)._parser()
    found[tool] = (
      {"help"}
      | {
        option[2:]
        for action in parser._actions  # pylint: disable=protected-access
        for option in action.option_strings
        if option[:2] == "--"
      }
    )
  return found


def _defined_flags() -> set[str]:
  """Every flag of the trainer and ctl's command lines, as they parse."""
  return set().union(*_tool_flags().values()) | _static_flags()


# ctl's command lines, and the module `python -m` runs for each.
_TOOLS = {
  "ctl-launch": "ctl.launch.launcher",
  "ctl-vertex": "ctl.cloud.vertex",
  "ctl-k8s": "ctl.cloud.k8s",
  "ctl-report": "ctl.report",
}
_RUN_AS = {"ctl.launch": "ctl-launch", "trainer.task": "ctl-train"} | {
  module: tool for tool, module in _TOOLS.items()
}
# What follows a tool's `--`: the trainer's flags, or a command of its own.
_AFTER_DASHES = {"ctl-vertex": "ctl-train", "ctl-k8s": "ctl-train"}


def _command_flags(line: str) -> list[tuple[str, str]]:
  """(tool, flag) of each --flag a tool of ours is given on a command line."""
  found, tool = [], None
  words = line.split()
  for index, word in enumerate(words):
    if word in ("|", "&&", ";", "||") or word.startswith(">"):
      tool = None
    elif word in _TOOLS or word == "ctl-train":
      tool = word
    elif words[index - 1 : index] == ["-m"] and word in _RUN_AS:
      tool = _RUN_AS[word]
    elif word == "--" and tool:
      tool = _AFTER_DASHES.get(tool)
    elif tool and re.match(r"--[a-z]", word):
      found.append((tool, word[2:].split("=")[0]))
  return found


def _commands(page: pathlib.Path) -> list[str]:
  """The command lines of a page: its ```sh blocks' (continued lines
  joined) and its code spans'."""
  text = page.read_text()
  blocks = re.findall(r"^```sh.*?\n(.*?)^```$", text, re.S | re.M)
  lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
  return lines + re.findall(r"`([^`\n]+)`", _FENCE.sub("", text))


def _misplaced_flags(pages: list[pathlib.Path]) -> list[str]:
  flags = _tool_flags()
  return [
    f"{page.name}: {tool} --{flag}"
    for page in pages
    for line in _commands(page)
    for tool, flag in _command_flags(line)
    if flag not in flags[tool]
  ]


def test_each_command_line_gives_a_tool_only_its_own_flags():
  assert not _misplaced_flags(_pages())


def _unknown_flags(pages: list[pathlib.Path]) -> list[str]:
  known = _defined_flags() | EXTERNAL_FLAGS
  return [
    f"{page}: --{flag}"
    for page, flag in _named(r"(?<![\w-])--([a-z][a-z0-9_-]*)", pages)
    if flag not in known
  ]


def test_every_flag_a_page_names_is_defined():
  assert not _unknown_flags(_pages())


def _missing_paths(pages: list[pathlib.Path]) -> list[str]:
  return [
    f"{page}: {path}"
    for page, path in _named(_PATH, pages)
    if not _exists(path)
  ]


def test_every_path_a_page_names_exists():
  assert not _missing_paths(_pages())


def _exists(path: str) -> bool:
  """Whether the repository has `path`; a `{a,b}` or `*` in it is a shell
  pattern, and a part in capitals (`X`, `NAME`) a placeholder for any."""
  path = re.sub(r"(?<![^/.])[A-Z]+(?![^/.])", "*", path)
  return all(glob.glob(os.path.join(REPO, p)) for p in _braces(path))


def _braces(pattern: str) -> list[str]:
  """A shell pattern's `{a,b}` alternatives, spelled out."""
  match = re.search(r"\{([^{}]*)\}", pattern)
  if not match:
    return [pattern]
  head, tail = pattern[: match.start()], pattern[match.end() :]
  return [p for alt in match[1].split(",") for p in _braces(head + alt + tail)]


def _missing_modules(pages: list[pathlib.Path]) -> list[str]:
  modules = set(_modules("ctl")) | set(_modules("trainer"))
  modules |= {name.removesuffix(".__main__") for name in modules}
  run = _named(r"python -m ((?:" + "|".join(_TOP) + r")(?:\.\w+)*)", pages)
  missing = [
    f"{page}: python -m {name}"
    for page, name in run
    if not name.startswith(("ctl", "trainer"))
    and not any(
      _exists(name.replace(".", "/") + suffix)
      for suffix in (".py", "/__main__.py")
    )
  ]
  missing += [
    f"{page}: {name}"
    for page, name in run + _named(r"`(ctl(?:\.\w+)+)", pages)
    if name.startswith(("ctl.", "trainer.")) and not _resolves(name, modules)
  ]
  return missing


def test_every_module_a_page_runs_or_names_exists():
  assert not _missing_modules(_pages())


def _resolves(name: str, modules: set[str]) -> bool:
  """`ctl.x.y...` is a module, or names of one (`ctl.run`, `ctl.io.fencing.OPEN`)."""
  parts = name.split(".")
  cut = max(
    n for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in modules
  )
  value = importlib.import_module(".".join(parts[:cut]))
  for attribute in parts[cut:]:
    if not hasattr(value, attribute):
      return False
    value = getattr(value, attribute)
  return True


def _missing_targets(pages: list[pathlib.Path]) -> list[str]:
  makefile = pathlib.Path(REPO, "Makefile").read_text()
  targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
  return [
    f"{page}: make {target}"
    for page, target in _named(r"(?:`|^|\$ )make ([a-z][\w-]*)", pages)
    if target not in targets
  ]


def test_every_make_target_a_page_names_is_in_the_makefile():
  assert not _missing_targets(_pages())


def _scripts() -> dict[str, str]:
  """{console script: its module in the checkout}, from the package metadata
  (setup.py installs the checkout's trainer/ as ctl_trainer)."""
  text = pathlib.Path(REPO, "setup.cfg").read_text()
  text += pathlib.Path(REPO, "pyproject.toml").read_text()
  text = text.replace("= ctl_trainer.", "= trainer.")
  return dict(
    re.findall(r'^\s*"?([\w-]+)"?\s*=\s*"?([\w.]+):\w+"?\s*$', text, re.M)
  )


def _exit_codes(module: str) -> set[int]:
  """The codes the modules of `module`'s folder that it reaches exit with."""
  graph, folder = _graph(), module.rpartition(".")[0]
  reached, todo = set(), [module]
  while todo:
    name = todo.pop()
    reached.add(name)
    todo += [t for t in graph[name] - reached if t.startswith(folder)]
  codes = set(ALWAYS)
  for name in reached:
    source = importlib.import_module(name).__file__
    for node in ast.walk(ast.parse(pathlib.Path(source).read_text())):
      codes |= _codes_of(node, importlib.import_module(name))
  return codes


def _codes_of(node: ast.AST, module) -> set[int]:
  """The exit codes one syntax node names: an `*_EXIT_CODE`, a caught ctl
  exception's, what `ctl.exit_code` gives, or a literal passed to an exit."""
  named = getattr(node, "attr", getattr(node, "id", ""))
  if named.endswith("EXIT_CODE"):
    return {getattr(module, named, getattr(errors, named, None))}
  if isinstance(node, ast.ExceptHandler) and node.type is not None:
    return _CAUGHT.get(getattr(node.type, "attr", ""), set())
  if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
    "exit_code"
  ):
    return _EXIT_CODE_GIVES
  if isinstance(node, ast.Call) and ast.unparse(node.func) in _EXITS:
    last = node.args[-1] if node.args else None
    if isinstance(last, ast.Constant) and isinstance(last.value, int):
      return {last.value}
  return set()


_EXITS = ("sys.exit", "_fail", "_exit_at_once", "os._exit")


def _exit_table() -> tuple[list[str], list[int]]:
  """(the tools its heading names, the codes) of README's exit-code table."""
  text = pathlib.Path(REPO, "README.md").read_text()
  section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
  heading, table = section.split("\n|", 1)
  tools = re.findall(r"`(ctl-[\w-]+)`", heading)
  return tools, [
    int(code) for code in re.findall(r"^\| `(\d+)` \|", table, re.M)
  ]


def test_the_exit_code_table_names_only_what_each_tool_exits_with():
  scripts, (tools, codes) = _scripts(), _exit_table()
  assert tools and codes
  assert set(tools) <= set(scripts), f"not console scripts: {tools}"
  wrong = []
  for tool in tools:
    can = _exit_codes(scripts[tool])
    if tool in RELAYS:
      can |= _exit_codes(scripts[RELAYS[tool]])
    wrong += [f"{tool}: {code}" for code in codes if code not in can]
  assert not wrong


def _unknown_codes(pages: list[pathlib.Path]) -> list[str]:
  can = set().union(*(_exit_codes(m) for m in _scripts().values()))
  return [
    f"{page}: exit {code}"
    for page, code in _named(r"\bexit(?:s|ed| code| status)? `?(\d+)\b", pages)
    if int(code) not in can and not 128 < int(code) < 128 + signal.NSIG
  ]


def test_every_exit_code_a_page_names_is_one_a_tool_exits_with():
  assert not _unknown_codes(_pages())


# `pip install` of a name or `.`, with extras: `pip install -e '.[report]'`.
_INSTALL = re.compile(
  r"pip install\s+(?:-[ec]\s+(?:constraints\.txt\s+)?)*['\"]?"
  r"([A-Za-z][\w.-]*|\.)(?:\[([\w,-]+)\])?"
)


def _distribution() -> tuple[str, set[str]]:
  """setup.cfg's distribution name and the extras it declares."""
  parser = configparser.ConfigParser()
  parser.read(os.path.join(REPO, "setup.cfg"))
  return parser["metadata"]["name"], set(parser["options.extras_require"])


def _wrong_installs(files: list[pathlib.Path]) -> list[str]:
  """'file: pip install X[E]' for each install of this project that names
  another distribution or an extra setup.cfg does not declare; installs of
  other projects (not starting with "ctl") are theirs."""
  name, extras = _distribution()
  wrong = []
  for path in files:
    for target, wanted in _INSTALL.findall(path.read_text()):
      ours = target == "." or target.lower().startswith("ctl")
      unknown = set(filter(None, wanted.split(","))) - extras
      if ours and (target not in (".", name) or unknown):
        shown = f"{target}[{wanted}]" if wanted else target
        wrong.append(f"{path.name}: pip install {shown}")
  return wrong


def _install_hints() -> list[pathlib.Path]:
  """The pages, the Makefile and every module of ctl/ and trainer/ (their
  error messages tell users what to install)."""
  code = [
    pathlib.Path(f)
    for f in _python_files()
    if os.path.relpath(f, REPO).split(os.sep)[0] in ("ctl", "trainer")
  ]
  return [*_pages(), pathlib.Path(REPO, "Makefile"), *code]


def test_every_install_of_this_project_names_its_distribution_and_extras():
  assert _wrong_installs(_install_hints()) == []


def test_the_checks_find_what_a_page_gets_wrong(tmp_path):
  page = tmp_path / "page.md"
  page.write_text(
    "Run `python -m ctl.launch --num_workers=2 --nmu_workers=2` or\n"
    "`python -m ctl.lunch`, see `ctl/launch/launcher.py`, `ctl/lunch.py`,\n"
    "`configs/{quickstart,slowstart}.cfg`, `ctl.run`, `ctl.runn`,\n"
    "`ctl.io.fencing.OPEN`, `ctl.io.fencing.CLOSED`; `make test`, `make tset`;\n"
    "it exits 75, or exit 76.\n"
  )
  pages = [page]
  assert _unknown_flags(pages) == ["page.md: --nmu_workers"]
  assert _misplaced_flags(pages) == ["page.md: ctl-launch --nmu_workers"]
  assert _missing_paths(pages) == [
    "page.md: configs/{quickstart,slowstart}.cfg",
    "page.md: ctl/lunch.py",
  ]
  assert _missing_modules(pages) == [
    "page.md: ctl.lunch",
    "page.md: ctl.io.fencing.CLOSED",
    "page.md: ctl.runn",
  ]
  assert _missing_targets(pages) == ["page.md: make tset"]
  assert _unknown_codes(pages) == ["page.md: exit 76"]
  hints = tmp_path / "hints.py"
  hints.write_text(
    "pip install 'ctl[report]'; pip install -e '.[reports]';\n"
    "pip install '.[k8s]', pip install apache-beam, pip install -e .\n"
  )
  assert _wrong_installs([hints]) == [
    "hints.py: pip install ctl[report]",
    "hints.py: pip install .[reports]",
  ]


def test_the_trainers_help_names_every_code_of_the_exit_table():
  """`ctl-train --help` starts with trainer/task.py's docstring, whose exit
  codes are the README table's."""
  _, codes = _exit_table()
  text = importlib.import_module("trainer.task").__doc__
  said = text.split("Exit codes:", 1)[1]
  assert [code for code in codes if not re.search(rf"\b{code}\b", said)] == []
