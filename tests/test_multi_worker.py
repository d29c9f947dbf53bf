"""Two real worker processes on loopback (MultiWorkerMirroredStrategy)."""

import os
import re
import subprocess

import numpy as np
import pytest

from tests.conftest import read_scalars
from tests.conftest import read_summary
from tests.conftest import run_trainer
from tests.conftest import trainer_env
from trainer.testing import launch_command
from trainer.testing import run_command

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

# No dropout: its masks depend on the local batch shape, which differs
# between 1 worker x 32 and 2 workers x 16.
STEPS = 12
FLAGS = (
  "--dataset=digits",
  "--model=small_cnn",
  "--dropout=0",
  "--image_size=16",
  f"--train_steps={STEPS}",
  "--steps_per_loop=1",
  "--log_every_steps=1",
  "--checkpoint_every_steps=6",
  "--eval_every_steps=0",
  "--learning_rate=0.003",
  "--seed=3",
)


def launch(
  num_workers: int, *flags, env=None, max_restarts: int = 0, timeout: int = 300
) -> subprocess.CompletedProcess:
  """Runs `ctl.launch` with the trainer command; returns when all exit."""
  return run_command(
    launch_command(
      f"--num_workers={num_workers}",
      f"--max_restarts={max_restarts}",
      trainer_flags=flags,
    ),
    env=env,
    timeout=timeout,
    check=False,
  )


def checkpoint_values(model_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints"))
  return {
    name: reader.get_tensor(name)
    for name in reader.get_variable_to_shape_map()
    if "optimizer/_trainable_variables" in name or "/kernel" in name
  }


@pytest.fixture(scope="module")
def one_and_two_workers(tmp_path_factory):
  """The same job on 1 worker (batch 32) and on 2 workers (16 each)."""
  root = tmp_path_factory.mktemp("mw")
  one = str(root / "one")
  run_trainer(*FLAGS, "--per_replica_batch_size=32", f"--model_dir={one}")
  two = str(root / "two")
  scratch = root / "tmp"
  scratch.mkdir()
  result = launch(
    2,
    *FLAGS,
    "--per_replica_batch_size=16",
    f"--model_dir={two}",
    env=trainer_env(TMPDIR=str(scratch)),
  )
  assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
  return one, two, scratch, result


def test_two_workers_match_one_worker_step_for_step(one_and_two_workers):
  one, two, _, result = one_and_two_workers
  assert "[worker 1]" in result.stdout + result.stderr
  losses_one = [
    v
    for _, v in read_scalars(os.path.join(one, "tensorboard", "train"))["loss"]
  ]
  losses_two = [
    v
    for _, v in read_scalars(os.path.join(two, "tensorboard", "train"))["loss"]
  ]
  assert len(losses_one) == len(losses_two) == STEPS
  np.testing.assert_allclose(losses_two, losses_one, rtol=1e-5)
  assert losses_one[0] != losses_one[-1]  # It trained.

  values_one, values_two = checkpoint_values(one), checkpoint_values(two)
  assert values_one.keys() == values_two.keys() and values_one
  for name, value in values_one.items():
    np.testing.assert_allclose(
      values_two[name], value, rtol=1e-4, atol=1e-5, err_msg=name
    )
  assert read_summary(two)["final_step"] == STEPS


def test_only_the_chief_writes_outputs(one_and_two_workers):
  _, two, scratch, _ = one_and_two_workers
  assert sorted(os.listdir(two)) == [
    "checkpoints",
    "ledger",
    "saved_model",
    "tensorboard",
    "train_summary.json",
  ]
  events = [
    f
    for _, _, files in os.walk(os.path.join(two, "tensorboard"))
    for f in files
    if "tfevents" in f
  ]
  # Worker 1 wrote no event file: one each for the HParams session, train
  # and validation, all from one process.
  assert len(events) == 3, events
  assert len({f.rsplit(".", 3)[1] for f in events}) == 1, events
  checkpoints = os.listdir(os.path.join(two, "checkpoints"))
  assert "checkpoint" in checkpoints
  # `run_id`: the run its local tiers belong to (ctl.checkpoint.tiers.local_tier).
  assert {f.split(".")[0] for f in checkpoints if f != "checkpoint"} == {
    "ckpt-0",
    "ckpt-6",
    "ckpt-12",
    "run_id",
  }
  leftovers = [
    os.path.join(d, n)
    for d, dirs, files in os.walk(two)
    for n in dirs + files
    if re.search(r"(^|_)(worker)?te?mp", n.lower())
  ]
  assert not leftovers
  # Worker 1's checkpoint and export scratch directories were removed.
  assert not [n for n in os.listdir(scratch) if n.startswith("ctl_")]
