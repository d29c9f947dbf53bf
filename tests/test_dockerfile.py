"""Fast static checks of the Dockerfile, read as Docker would.

The image runs `python -m trainer.task <CMD>` in WORKDIR, which holds the
build context (the repository root less .dockerignore); the last test runs
that same command line from the repository root, with the AIP_* directories
Vertex AI sets, and --dry_run so that it checks the flags without training.
The image itself is built and run by `make container-check`
(scripts/container_check.py), which needs root and minutes, so not here.
"""

import fnmatch
import json
import pathlib
import re
import subprocess
import sys

from dockerfile_parse import DockerfileParser
from packaging import requirements
import pytest

from tests.conftest import REPO
from tests.conftest import run_trainer
from tests.conftest import trainer_env
from trainer.testing import vertex_output_env

_ROOT = pathlib.Path(REPO)


@pytest.fixture(name="dockerfile", scope="module")
def fixture_dockerfile():
  return DockerfileParser(path=str(_ROOT / "Dockerfile"))


def _instructions(dockerfile, name):
  return [
    item["value"]
    for item in dockerfile.structure
    if item["instruction"] == name
  ]


def _exec_form(dockerfile, name):
  """The JSON list of the last `name` instruction; fails for shell form."""
  values = _instructions(dockerfile, name)
  assert values, f"the Dockerfile has no {name}"
  return json.loads(values[-1])


def _pinned_tensorflow_version():
  text = (_ROOT / "constraints.txt").read_text()
  for line in text.splitlines():
    if line.strip() and not line.startswith("#"):
      requirement = requirements.Requirement(line.strip())
      if requirement.name == "tensorflow":
        (specifier,) = requirement.specifier
        assert specifier.operator == "=="
        return specifier.version
  raise AssertionError("constraints.txt does not pin tensorflow")


def test_base_image_has_the_pinned_tensorflow(dockerfile):
  # FROM ${BASE_IMAGE}: the default is the GPU image of the pinned TensorFlow,
  # by tag and, where it could be looked up, by digest.
  assert _instructions(dockerfile, "FROM") == ["${BASE_IMAGE}"]
  image, _, digest = dockerfile.baseimage.partition("@")
  repository, tag = image.split(":")

  assert repository == "tensorflow/tensorflow"
  assert tag == f"{_pinned_tensorflow_version()}-gpu"
  assert not digest or re.fullmatch(r"sha256:[0-9a-f]{64}", digest), digest


def test_dependencies_are_installed_before_the_code_is_copied(dockerfile):
  # A code change then reuses the layer that holds TensorFlow.
  steps = [
    (item["instruction"], item["value"])
    for item in dockerfile.structure
    if item["instruction"] in ("COPY", "RUN")
  ]
  workdir = _instructions(dockerfile, "WORKDIR")[-1]
  copies = [value for instruction, value in steps if instruction == "COPY"]
  assert copies == [f"setup.cfg constraints.txt {workdir}/", f". {workdir}"]
  code = steps.index(("COPY", f". {workdir}"))
  # The exact versions CI tests (constraints.txt), not just setup.cfg's ranges.
  assert any(
    "pip install -c constraints.txt -r" in value for _, value in steps[:code]
  )
  assert all(
    "--no-deps" in value
    for instruction, value in steps[code:]
    if "pip install" in value
  )


def test_the_trainer_runs_as_a_non_root_user(dockerfile):
  structure = [item["instruction"] for item in dockerfile.structure]
  user = _instructions(dockerfile, "USER")[-1]

  assert user.split(":")[0] not in ("root", "0")
  # Nothing runs as root after it.
  assert "RUN" not in structure[structure.index("USER") :]


def test_entrypoint_runs_the_trainer_module_in_exec_form(dockerfile):
  # Exec form keeps python as PID 1, so SIGTERM on preemption reaches it.
  assert _exec_form(dockerfile, "ENTRYPOINT") == [
    "python",
    "-m",
    "trainer.task",
  ]
  assert (_ROOT / "trainer" / "task.py").is_file()


def test_dockerignore_keeps_what_the_image_needs():
  patterns = [
    line.strip()
    for line in (_ROOT / ".dockerignore").read_text().splitlines()
    if line.strip() and not line.startswith("#")
  ]
  needed = [
    "setup.cfg",
    "constraints.txt",
    "pyproject.toml",
    "README.md",
    "ctl/errors.py",
    "trainer/task.py",
    "configs/cassava_resnet50.cfg",
  ]

  for path in needed:
    parts = pathlib.PurePosixPath(path).parts
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = [
      p
      for p in patterns
      if any(fnmatch.fnmatch(prefix, p) for prefix in prefixes)
    ]
    assert not excluded, f".dockerignore drops {path} with {excluded}"
  assert {".git", ".venv", "tests", "benchmarks"} <= set(patterns)


@pytest.mark.processes
def test_default_cmd_is_accepted_by_the_trainer(dockerfile, tmp_path):
  cmd = _exec_form(dockerfile, "CMD")
  # The output directories Vertex AI sets for a job with baseOutputDirectory.
  result = run_trainer(
    *cmd,
    "--dry_run",
    check=False,
    env=trainer_env(**vertex_output_env(str(tmp_path))),
  )

  assert result.returncode == 0, result.stderr


@pytest.mark.processes
def test_the_container_check_imports_with_the_standard_library_only():
  # `make container-check` runs scripts/container_check.py on the system
  # Python, which has none of the project's dependencies (-S: no site dirs):
  # the script, its sibling modules (scripts/podman_sandbox.py,
  # scripts/image_checks.py) and what they import (trainer.testing,
  # ctl.testing.events).
  result = subprocess.run(
    [
      sys.executable,
      "-S",
      "-c",
      "import sys; sys.path.insert(0, 'scripts'); import container_check",
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    check=False,
  )
  assert result.returncode == 0, result.stderr[-2000:]
