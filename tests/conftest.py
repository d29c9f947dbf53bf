"""Shared test helpers: run the trainer as a user does, read what it wrote.

Tests drive the real command line (`python -m trainer.task`) in a subprocess:
that is what users, the container and Vertex AI run, and it keeps global
TensorFlow state (mixed-precision policy, determinism, logical devices) out of
the pytest process.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.gcs_emulator import gcs_emulator  # pylint: disable=unused-import

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Small and fast: real digits, a small CNN with dropout, a few dozen steps.
FAST_FLAGS = (
    "--dataset=digits", "--model=small_cnn", "--dropout=0.1",
    "--image_size=16", "--per_replica_batch_size=32", "--steps_per_loop=10",
    "--log_every_steps=10", "--eval_every_steps=20",
    "--checkpoint_every_steps=20", "--learning_rate=0.003",
)


def trainer_env(**extra) -> dict:
  """The environment for a trainer subprocess (no TF_CONFIG leaks in)."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("TF_CONFIG", "CLUSTER_SPEC")}
  env.update(PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2", **extra)
  return env


def trainer_command(*flags) -> list[str]:
  return [sys.executable, "-m", "trainer.task", *flags]


def run_trainer(*flags, env=None, timeout=300,
                check=True) -> subprocess.CompletedProcess:
  """Runs `python -m trainer.task FLAGS` to completion from the repo root."""
  result = subprocess.run(trainer_command(*flags), cwd=REPO,
                          env=env or trainer_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)
  if check and result.returncode != 0:
    raise AssertionError(f"trainer exited {result.returncode}:\n"
                         f"{result.stderr[-4000:]}")
  return result


def free_ports(count: int) -> list[int]:
  """Loopback ports nothing listens on now (all held open while chosen)."""
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("localhost", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def read_summary(model_dir) -> dict:
  with open(os.path.join(model_dir, "train_summary.json")) as f:
    return json.load(f)


def read_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
  """Every scalar in the event files under `logdir`: {tag: [(step, value)]}.

  TF2 summaries are stored as tensors, so they are read through the
  accumulator's tensor API.
  """
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  accumulator = event_accumulator.EventAccumulator(
      logdir, size_guidance={event_accumulator.TENSORS: 0})
  accumulator.Reload()
  return {tag: [(e.step, float(tf.make_ndarray(e.tensor_proto)))
                for e in accumulator.Tensors(tag)]
          for tag in accumulator.Tags()["tensors"]}


@pytest.fixture
def model_dir(tmp_path):
  return str(tmp_path / "run")
