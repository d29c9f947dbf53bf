"""The five console scripts answer alike: `--help` and `--helpfull` list
their flags and exit 0 (absl for ctl-train, ctl.errors.ArgumentParser for
the other four; docs/design.md "Style")."""

import os
import sys

import pytest

from trainer.testing import run_command

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

# Each script and a flag its help must list.
_SCRIPTS = {
  "ctl-train": "--train_steps",
  "ctl-launch": "--num_workers",
  "ctl-vertex": "--image",
  "ctl-k8s": "--image",
  "ctl-report": "--png",
}


def _script(name: str) -> str:
  return os.path.join(os.path.dirname(sys.executable), name)


@pytest.mark.parametrize("help_flag", ["--help", "--helpfull"])
@pytest.mark.parametrize("name", sorted(_SCRIPTS))
def test_help_lists_the_flags_and_exits_0(name, help_flag, tmp_path):
  # From outside the checkout: the installed script, not the source tree.
  result = run_command(
    [_script(name), help_flag], check=False, cwd=str(tmp_path)
  )
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  assert _SCRIPTS[name] in result.stdout
  assert "--helpfull" in result.stdout
  assert "Traceback" not in result.stderr


def test_the_trainers_help_lists_every_exit_code_of_the_readme():
  result = run_command([_script("ctl-train"), "--help"], check=False)
  for code in ("0", "1", "2", "74", "75", "77", "130", "143"):
    assert f" {code} " in " ".join(result.stdout.split()), code


def test_the_trainers_helpfull_lists_each_flag_once_under_its_topic():
  """48 flags in one alphabetical group tell a newcomer little: --helpfull
  lists them by topic (trainer.flags.TOPICS), each exactly once, and a flag
  added without a topic fails here."""
  from absl import flags  # pylint: disable=g-import-not-at-top

  from trainer import flags as trainer_flags  # pylint: disable=g-import-not-at-top

  defined = {
    f.name for f in flags.FLAGS.get_flags_for_module(trainer_flags.__name__)
  }
  topics = dict(trainer_flags.TOPICS)
  assert sorted(n for names in topics.values() for n in names) == sorted(
    defined
  )
  result = run_command([_script("ctl-train"), "--helpfull"], check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  section, found = None, {}
  for line in result.stdout.splitlines():
    if line and not line.startswith(" ") and line.endswith(":"):
      section = line[:-1]
    elif line.startswith("  --"):
      name = line[4:].split(":")[0].removeprefix("[no]")
      found.setdefault(name, []).append(section)
  assert {n: found.get(n) for n in defined} == {
    n: [t] for t, names in topics.items() for n in names
  }
  assert "--flagfile" in result.stdout
