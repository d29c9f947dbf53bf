"""A side-car evaluator task beside a training chief (real processes)."""

import dataclasses
import json
import logging
import os
import subprocess

import pytest

from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import read_scalars
from tests.conftest import read_summary
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from tests.test_controller import _run_tiny
from tests.test_controller import _tiny_task
from tests.test_options import make_options


@pytest.mark.processes
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
  assert "evaluator: eval at step 40" in outputs["evaluator"]
  # The validation run dir is the evaluator's alone: the chief evaluated (its
  # summary has the final accuracy) but wrote no validation event file.
  events = os.listdir(os.path.join(board, "validation"))
  assert len(events) == 1, events
  assert events[0].rsplit(".", 3)[1] == str(processes["evaluator"].pid)
  assert "eval at step 20" in outputs["chief"]


def test_evaluator_given_a_damaged_newest_checkpoint_restores_the_one_before(
  tmp_path, caplog
):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from ctl.train import evaluator  # pylint: disable=g-import-not-at-top

  trained_alone = dataclasses.replace(_tiny_task(), eval_dataset_fn=None)
  _run_tiny(tmp_path, trained_alone, train_steps=4, checkpoint_every_steps=2)
  checkpoints = tmp_path / "run" / "checkpoints"
  (data,) = checkpoints.glob("ckpt-4.data-*")
  data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
  with caplog.at_level(logging.WARNING):
    results = evaluator.evaluate_checkpoints(
      task=_tiny_task(),
      options=make_options(tmp_path, train_steps=4),
      strategy=tf.distribute.get_strategy(),
      poll_secs=0,
      timeout_secs=0,
    )
  assert list(results) == [2]  # ckpt-4 is unreadable: ckpt-2 is evaluated.
  warnings = " ".join(r.getMessage() for r in caplog.records)
  assert f"{checkpoints}/ckpt-4 is unreadable" in warnings
  validation = read_scalars(
    str(tmp_path / "run" / "tensorboard" / "validation")
  )
  assert [step for step, _ in validation["accuracy"]] == [2]
