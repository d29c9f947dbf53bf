"""A side-car evaluator task beside a training chief (real processes)."""

import json
import os
import subprocess

import pytest

from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import read_scalars
from tests.conftest import read_summary
from tests.conftest import trainer_command
from tests.conftest import trainer_env


def test_evaluator_follows_the_chief_to_the_last_checkpoint(model_dir):
  cluster = {"chief": ["localhost:1"], "evaluator": ["localhost:2"]}
  flags = (*FAST_FLAGS, "--train_steps=40", f"--model_dir={model_dir}")
  processes = {
    role: subprocess.Popen(
      trainer_command(*flags),
      cwd=REPO,
      env=trainer_env(
        TF_CONFIG=json.dumps(
          {"cluster": cluster, "task": {"type": role, "index": 0}}
        )
      ),
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for role in ("chief", "evaluator")
  }
  outputs = {
    role: p.communicate(timeout=300)[0] for role, p in processes.items()
  }
  for role, process in processes.items():
    assert process.returncode == 0, outputs[role][-3000:]

  chief = read_summary(model_dir)
  board = os.path.join(model_dir, "tensorboard")
  validation = read_scalars(os.path.join(board, "validation"))
  assert set(validation) == {"loss", "accuracy"}  # The chief's train tags.
  assert {"loss", "accuracy"} < set(read_scalars(os.path.join(board, "train")))
  evaluated = dict(validation["accuracy"])
  assert max(evaluated) == 40  # It stopped after the final checkpoint.
  assert evaluated[40] == pytest.approx(chief["eval_accuracy"], abs=1e-6)
  assert "evaluator: step 40" in outputs["evaluator"]
  # The validation run dir is the evaluator's alone: the chief evaluated (its
  # summary has the final accuracy) but wrote no validation event file.
  events = os.listdir(os.path.join(board, "validation"))
  assert len(events) == 1, events
  assert events[0].rsplit(".", 3)[1] == str(processes["evaluator"].pid)
  assert "eval at step 20" in outputs["chief"]
