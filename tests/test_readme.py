"""The README's shell examples, run as written, so the two cannot drift.

Every ```sh block of README.md runs here with bash (-e, -u, pipefail), in
README order, in one scratch directory that looks like the checkout (its
`.venv`, `configs`, `scripts`) with the venv's bin first on PATH, as for a
user with the venv activated. A block that cannot run offline or here (make
targets, servers, gcloud, docker, apt-get) says so with the info string
```sh not-tested and is only counted.

To keep this fast, the scratch configs/quickstart.cfg is the real one plus
QUICKSTART_OVERRIDES (later flags win in a flagfile); the steps, the model and
every flag on the README's command lines are as written. $IMAGE is what the
README's build block sets.
"""

import os
import pathlib
import re
import shutil

from tests.conftest import REPO
from tests.conftest import trainer_env
from trainer.testing import run_command

QUICKSTART_OVERRIDES = ("--image_size=16", "--per_replica_batch_size=16")
IMAGE = "us-docker.pkg.dev/my-project/ctl/trainer:latest"
_BLOCK = re.compile(
  r"^```sh( not-tested)?\n(.*?)^```$", re.DOTALL | re.MULTILINE
)


def _blocks() -> list[tuple[bool, str]]:
  """(runs here, text) of each ```sh block, in README order."""
  text = pathlib.Path(REPO, "README.md").read_text()
  return [(not skip, body) for skip, body in _BLOCK.findall(text)]


def _workspace(root: pathlib.Path) -> pathlib.Path:
  """A directory where the README's relative paths mean the checkout's."""
  for name in (".venv", "scripts"):
    (root / name).symlink_to(os.path.join(REPO, name))
  shutil.copytree(os.path.join(REPO, "configs"), root / "configs")
  with open(root / "configs" / "quickstart.cfg", "a") as f:
    f.write("".join(f"{flag}\n" for flag in QUICKSTART_OVERRIDES))
  return root


def test_every_block_is_run_or_marked():
  text = pathlib.Path(REPO, "README.md").read_text()
  assert any(runs for runs, _ in _blocks()), "no tested ```sh block"
  assert len(_blocks()) == len(re.findall(r"^```sh", text, re.MULTILINE)), (
    "a ```sh block with an info string this test does not know"
  )


def test_readme_shell_examples_run_as_written(tmp_path):
  work = _workspace(tmp_path)
  env = trainer_env(IMAGE=IMAGE)
  env["PATH"] = f"{os.path.join(REPO, '.venv', 'bin')}:{env['PATH']}"
  for runs, body in _blocks():
    if not runs:
      continue
    result = run_command(
      ["bash", "-euo", "pipefail", "-c", body],
      cwd=work,
      env=env,
      timeout=600,
      check=False,
    )
    assert result.returncode == 0, f"{body}\n{result.stderr[-3000:]}"
  assert (work / "job.yaml").stat().st_size > 0
  assert (work / "runs" / "two" / "train_summary.json").exists()
