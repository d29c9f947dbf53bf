"""Helpers that run the reference trainer as a user does (tests, benchmarks).

Tests and benchmarks drive the real command line (`python -m trainer.task`) in
a subprocess: that is what users, the container and Vertex AI run, and it keeps
global TensorFlow state (mixed-precision policy, determinism, logical devices)
out of the calling process. Framework-generic helpers (the Cloud Storage
emulator, reading a run's files) are in `ctl.testing`.
"""

import os
import subprocess
import sys

# The checkout's root: the working directory of trainer subprocesses, and the
# base of `configs/`, `Dockerfile` and the other files tests read.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Small and fast: real digits, a small CNN with dropout, a few dozen steps.
FAST_FLAGS = (
  "--dataset=digits",
  "--model=small_cnn",
  "--dropout=0.1",
  "--image_size=16",
  "--per_replica_batch_size=32",
  "--steps_per_loop=10",
  "--log_every_steps=10",
  "--eval_every_steps=20",
  "--checkpoint_every_steps=20",
  "--learning_rate=0.003",
)


# Offline stand-ins for cassava and ResNet50 in a Vertex AI config's args;
# later flags win over the flagfile (tests/test_vertex_contract.py and
# scripts/container_check.py).
OFFLINE_FLAGS = (
  "--dataset=digits",
  "--model=small_cnn",
  "--weights=none",
  "--image_size=16",
  "--per_replica_batch_size=16",
  "--epochs=1",
  "--steps_per_loop=11",
  "--log_every_steps=11",
  "--checkpoint_every_steps=0",
  "--data_dir=",
)

# What a finished run must leave in its --model_dir, and in a Vertex AI job's
# base output directory (AIP_* directories plus the run's own files). A run
# may add more (the ledger, a lease); checks ask for these, not only these.
RUN_DIR_OUTPUTS = (
  "checkpoints",
  "saved_model",
  "tensorboard",
  "train_summary.json",
)
VERTEX_JOB_OUTPUTS = ("checkpoints", "logs", "model", "train_summary.json")


def trainer_env(**extra: str) -> dict[str, str]:
  """The environment for a trainer subprocess.

  This process's environment without a cluster (no TF_CONFIG or CLUSTER_SPEC
  leaks in), with the checkout first on PYTHONPATH and TensorFlow's C++ log
  quiet; `extra` variables are set last.
  """
  env = {
    k: v
    for k, v in os.environ.items()
    if k not in ("TF_CONFIG", "CLUSTER_SPEC")
  }
  env.update(
    PYTHONPATH=os.pathsep.join(
      p for p in (REPO, os.environ.get("PYTHONPATH")) if p
    ),
    TF_CPP_MIN_LOG_LEVEL="2",
    **extra,
  )
  return env


def vertex_output_env(base: str) -> dict[str, str]:
  """The AIP_* directories Vertex AI sets for a job whose base output is `base`.

  As Vertex AI writes them: below `base`, each ending with a slash.
  """
  return {
    "AIP_MODEL_DIR": f"{base}/model/",
    "AIP_CHECKPOINT_DIR": f"{base}/checkpoints/",
    "AIP_TENSORBOARD_LOG_DIR": f"{base}/logs/",
  }


def trainer_command(*flags: str) -> list[str]:
  """`python -m trainer.task FLAGS` with this process's interpreter."""
  return [sys.executable, "-m", "trainer.task", *flags]


def run_trainer(
  *flags: str,
  env: dict[str, str] | None = None,
  timeout: float = 300,
  check: bool = True,
) -> subprocess.CompletedProcess:
  """Runs `python -m trainer.task FLAGS` to completion from the checkout.

  Args:
    *flags: the trainer's flags.
    env: its environment (default: `trainer_env()`).
    timeout: seconds before it is killed (subprocess.TimeoutExpired).
    check: raise AssertionError, with the end of stderr, on a non-zero exit.

  Returns:
    The finished process, its output captured as text.
  """
  result = subprocess.run(
    trainer_command(*flags),
    cwd=REPO,
    env=env or trainer_env(),
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
  )
  if check and result.returncode != 0:
    raise AssertionError(
      f"trainer exited {result.returncode}:\n{result.stderr[-4000:]}"
    )
  return result
