"""The package's public face: what `import ctl` gives, and what it costs."""

import configparser
import os
import subprocess
import sys

from packaging import requirements
from packaging import specifiers
from packaging import utils
from packaging import version
import pytest

import ctl
from ctl import errors
from ctl.train import controller
from ctl.train import options
from trainer.testing import REPO
from trainer.testing import run_command


def _run_logging_imports(*args: str) -> subprocess.CompletedProcess:
  """Runs a fresh Python with -X importtime: stderr logs every import."""
  return run_command(
    [sys.executable, "-X", "importtime", *args], timeout=120, check=False
  )


def test_what_a_user_calls_is_on_the_package():
  assert ctl.run is controller.run
  assert ctl.Task is options.Task and ctl.RunOptions is options.RunOptions
  for name in (
    "UserError",
    "Preempted",
    "TrainingDiverged",
    "USER_ERROR_EXIT_CODE",
    "PREEMPTED_EXIT_CODE",
  ):
    assert getattr(ctl, name) is getattr(errors, name)
  assert set(ctl.__all__) <= set(dir(ctl))
  with pytest.raises(AttributeError, match="no attribute 'Trainer'"):
    ctl.Trainer  # noqa: B018  # pylint: disable=pointless-statement


def test_every_exception_is_in_the_errors_module():
  for error in (ctl.UserError, ctl.Preempted, ctl.TrainingDiverged):
    assert error.__module__ == "ctl.errors"


def test_each_exception_of_ctl_run_has_the_exit_code_the_trainer_uses():
  """`ctl.exit_code`, which the trainer and the examples exit with: a lost
  lease (77) is never a generic failure (1) that an agent would restart."""
  cases = [
    (ctl.UserError("x"), ctl.USER_ERROR_EXIT_CODE),
    (ctl.Preempted(10), ctl.PREEMPTED_EXIT_CODE),
    (ctl.Preempted(10, signum=2), 130),
    (ctl.TrainingDiverged("x"), 1),
    (ctl.Stalled("x"), ctl.STALL_EXIT_CODE),
    (ctl.CannotWrite("x"), ctl.CANNOT_WRITE_EXIT_CODE),
    (ctl.LeaseLost("x"), ctl.LEASE_LOST_EXIT_CODE),
    (ctl.LeaseVanished("x", directory_gone=True), ctl.USER_ERROR_EXIT_CODE),
    (ctl.LeaseVanished("x", directory_gone=False), ctl.CANNOT_WRITE_EXIT_CODE),
    (ctl.PeerLost("x"), ctl.STALL_EXIT_CODE),
    (ValueError("a bug"), None),
  ]
  assert [ctl.exit_code(e) for e, _ in cases] == [code for _, code in cases]


@pytest.mark.parametrize(
  "args,says",
  [
    (("-c", "import ctl; print(ctl.UserError.__name__)"), "UserError"),
    (("-m", "trainer.task", "--help"), "--train_steps"),
    (("-m", "ctl.launch", "--help"), "--num_workers"),
  ],
  ids=["import ctl", "trainer --help", "launch --help"],
)
@pytest.mark.processes
def test_light_entry_points_do_not_load_tensorflow(args, says):
  result = _run_logging_imports(*args)
  assert says in result.stdout, result.stderr[-3000:]
  assert "import time:" in result.stderr  # The import log is there.
  assert "tensorflow" not in result.stderr


def _declared_requirements() -> list[requirements.Requirement]:
  """setup.cfg's install_requires and every extra's, less the package's own
  extras (`ctl-train-loop[...]`)."""
  parser = configparser.ConfigParser()
  parser.read(os.path.join(REPO, "setup.cfg"))
  lines = parser["options"]["install_requires"].splitlines()
  for extra in parser["options.extras_require"].values():
    lines += extra.splitlines()
  declared = [requirements.Requirement(line) for line in lines if line.strip()]
  return [r for r in declared if r.name != _distribution_name()]


def _distribution_name() -> str:
  parser = configparser.ConfigParser()
  parser.read(os.path.join(REPO, "setup.cfg"))
  return parser["metadata"]["name"]


def _pins() -> dict[str, str]:
  """constraints.txt as {normalized name: exact version}."""
  pins = {}
  with open(os.path.join(REPO, "constraints.txt")) as f:
    for line in f:
      if line.strip() and not line.startswith("#"):
        requirement = requirements.Requirement(line.strip())
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", line
        pins[utils.canonicalize_name(requirement.name)] = specifier.version
  return pins


def test_setup_cfg_declares_ranges_and_constraints_pin_inside_them():
  pins = _pins()
  declared = _declared_requirements()
  for requirement in declared:
    name = utils.canonicalize_name(requirement.name)
    # A range a user's environment can resolve, not one exact version.
    assert not any(s.operator == "==" for s in requirement.specifier), name
    assert name in pins, f"constraints.txt does not pin {name}"
    assert requirement.specifier.contains(pins[name], prereleases=True), (
      f"{name}=={pins[name]} is outside setup.cfg's {requirement.specifier}"
    )
  names = {utils.canonicalize_name(r.name) for r in declared}
  assert set(pins) == names, set(pins) ^ names  # No pin of nothing.


def test_every_range_is_bounded_and_starts_at_the_tested_version():
  # The pin is the one version tested, so it is the lower bound (README
  # "Install as a package"); the upper bound keeps the next major out.
  pins = _pins()
  for requirement in _declared_requirements():
    name = utils.canonicalize_name(requirement.name)
    operators = {s.operator: s.version for s in requirement.specifier}
    assert "<" in operators, f"{name} has no upper bound"
    assert version.parse(operators[">="]) == version.parse(pins[name]), (
      f"{name}'s lower bound {operators['>=']} is not the tested {pins[name]}"
    )


def test_the_distribution_is_not_named_ctl_and_is_licensed():
  # `ctl` on PyPI is another project: `pip install ctl` installs it.
  parser = configparser.ConfigParser()
  parser.read(os.path.join(REPO, "setup.cfg"))
  assert _distribution_name() == "ctl-train-loop"
  classifiers = parser["metadata"]["classifiers"].split("\n")
  assert "License :: OSI Approved :: Apache Software License" in classifiers


def test_the_python_versions_claimed_agree():
  # Verified ones only (README "Install as a package" says how): the
  # classifiers list exactly the versions python_requires admits.
  parser = configparser.ConfigParser()
  parser.read(os.path.join(REPO, "setup.cfg"))
  admits = specifiers.SpecifierSet(parser["options"]["python_requires"])
  classifiers = parser["metadata"]["classifiers"].split("\n")
  listed = {
    line.rsplit(" :: ", 1)[1]
    for line in classifiers
    if line.startswith("Programming Language :: Python :: 3.")
  }
  assert listed == set(admits.filter(f"3.{minor}" for minor in range(8, 16)))
  assert f"{sys.version_info.major}.{sys.version_info.minor}" in listed
