"""A side-car evaluator task beside a training chief (real processes)."""

import json
import os
import subprocess

import pytest

from tests.conftest import (FAST_FLAGS, REPO, read_scalars, read_summary,
                            trainer_command, trainer_env)


def test_evaluator_follows_the_chief_to_the_last_checkpoint(model_dir):
  cluster = {"chief": ["localhost:1"], "evaluator": ["localhost:2"]}
  flags = (*FAST_FLAGS, "--train_steps=40", f"--model_dir={model_dir}")
  processes = {
      role: subprocess.Popen(
          trainer_command(*flags), cwd=REPO,
          env=trainer_env(TF_CONFIG=json.dumps(
              {"cluster": cluster, "task": {"type": role, "index": 0}})),
          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      for role in ("chief", "evaluator")}
  outputs = {role: p.communicate(timeout=300)[0]
             for role, p in processes.items()}
  for role, process in processes.items():
    assert process.returncode == 0, outputs[role][-3000:]

  chief = read_summary(model_dir)
  evaluator = read_scalars(os.path.join(model_dir, "tensorboard", "evaluator"))
  evaluated = dict(evaluator["eval/accuracy"])
  assert max(evaluated) == 40  # It stopped after the final checkpoint.
  assert evaluated[40] == pytest.approx(chief["eval_accuracy"], abs=1e-6)
  assert "evaluator: step 40" in outputs["evaluator"]
  # The evaluator wrote no checkpoint, export or summary of its own.
  assert "train/loss" not in evaluator
  assert sorted(os.listdir(os.path.join(model_dir, "tensorboard"))) == [
      "evaluator", *sorted(f for f in os.listdir(
          os.path.join(model_dir, "tensorboard")) if "tfevents" in f)]
