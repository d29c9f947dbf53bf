"""The five console scripts answer alike: `--help` and `--helpfull` list
their flags and exit 0 (absl for ctl-train, ctl.errors.ArgumentParser for
the other four; docs/design.md "Style")."""

import os
import sys

import pytest

from trainer.testing import run_command

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
