"""Helpers that run the reference trainer as a user does (tests, benchmarks).

Tests and benchmarks drive the real command line (`python -m trainer.task`) in
a subprocess: that is what users, the container and Vertex AI run, and it keeps
global TensorFlow state (mixed-precision policy, determinism, logical devices)
out of the calling process. Framework-generic helpers (the Cloud Storage
emulator, reading a run's files) are in `ctl.testing`.
"""

import contextlib
import os
import subprocess
import sys
import tempfile

from ctl import STALL_EXIT_CODE
from ctl import env as ctl_env
from ctl.platform import resolver
from ctl.platform import vertex_ai
from ctl.testing import events as events_lib
from ctl.testing.run_files import read_summary

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

# The resume scenarios' schedule (kill, stall or restore, then compare the
# numbers with an uninterrupted run): deterministic, loops of 5 steps, a
# checkpoint every 10, no evaluation.
RESUME_FLAGS = (
  "--deterministic",
  "--steps_per_loop=5",
  "--log_every_steps=5",
  "--checkpoint_every_steps=10",
  "--eval_every_steps=0",
)

# Offline stand-ins for cassava and ResNet50 in a Vertex AI config's args;
# later flags win over the flagfile (tests/test_vertex_contract.py and
# scripts/image_checks.py).
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


def share_few_cores() -> None:
  """Gives every TensorFlow this process starts one inter-op thread.

  For checks that run many TensorFlow processes at once on few cores (the
  test suite: 4-10 on 2 cores; the cluster check: two clusters of three
  nodes): a pool of a thread per core in each process only adds threads that
  compete for the same cores. Measured on 2 cores (2026-12-06): four 40-step
  digits runs side by side, 13.2 -> 10.4 s; 138 tests of four kill/resume
  modules, 322 -> 285 s. Set in this process's environment, which its
  children inherit (`trainer_env` copies it), unless it is set already. Not
  for benchmarks of speed: a user's trainer keeps TensorFlow's default.
  """
  os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")


def trainer_env(*, faults: str | None = None, **extra: str) -> dict[str, str]:
  """The environment for a trainer subprocess.

  This process's environment without a cluster (no TF_CONFIG or CLUSTER_SPEC
  leaks in), with the checkout first on PYTHONPATH and TensorFlow's C++ log
  quiet; `faults` (a `CTL_FAULTS` value) are injected, with the switch that
  lets them act (`ctl.env.faults_environment`); `extra` variables are set last.
  """
  env = {
    k: v for k, v in os.environ.items() if k not in resolver.CLUSTER_VARIABLES
  }
  env.update(
    PYTHONPATH=os.pathsep.join(
      p for p in (REPO, os.environ.get("PYTHONPATH")) if p
    ),
    TF_CPP_MIN_LOG_LEVEL="2",
    **({} if faults is None else ctl_env.faults_environment(faults)),
    **extra,
  )
  return env


def vertex_output_env(base: str) -> dict[str, str]:
  """The AIP_* directories Vertex AI sets for a job whose base output is `base`.

  As Vertex AI writes them: below `base`, each ending with a slash.
  """
  subdirs = {
    "model": "model",
    "checkpoint": "checkpoints",
    "tensorboard": "logs",
  }
  return {
    vertex_ai.OUTPUT_DIRS[role]: f"{base}/{subdir}/"
    for role, subdir in subdirs.items()
  }


def trainer_command(*flags: str) -> list[str]:
  """`python -m trainer.task FLAGS` with this process's interpreter."""
  return [sys.executable, "-m", "trainer.task", *flags]


# Runs the trainer, then says on stdout whether TensorFlow was ever imported.
_REPORTING_TF = (
  "import atexit, sys; "
  "atexit.register(lambda: print('TF_IMPORTED', 'tensorflow' in "
  "sys.modules)); "
  "from trainer import task; sys.argv[0] = 'trainer.task'; task.run()"
)


def trainer_command_reporting_tf(*flags: str) -> list[str]:
  """`trainer_command(*flags)` whose last stdout line is `TF_IMPORTED True`
  or `TF_IMPORTED False`: what a check promises to answer before TensorFlow
  loads is proved so."""
  return [sys.executable, "-c", _REPORTING_TF, *flags]


def launch_command(*flags: str, trainer_flags=()) -> list[str]:
  """`python -m ctl.launch FLAGS -- python -m trainer.task TRAINER_FLAGS`."""
  return [
    sys.executable,
    "-m",
    "ctl.launch",
    *flags,
    "--",
    *trainer_command(*trainer_flags),
  ]


def run_command(
  command: list[str],
  *,
  env: dict[str, str] | None = None,
  timeout: float = 300,
  check: bool = True,
  cwd: str = REPO,
) -> subprocess.CompletedProcess:
  """Runs `command` to completion, from the checkout unless told otherwise.

  Args:
    command: the command line.
    env: its environment (default: `trainer_env()`).
    timeout: seconds before it is killed (subprocess.TimeoutExpired).
    check: raise AssertionError, with the end of stderr, on a non-zero exit.
    cwd: its working directory.

  Returns:
    The finished process, its output captured as text.
  """
  result = subprocess.run(
    command,
    cwd=cwd,
    env=env or trainer_env(),
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
  )
  if check and result.returncode != 0:
    raise AssertionError(
      f"{' '.join(command[:3])} ... exited {result.returncode}:\n"
      f"{result.stderr[-4000:]}"
    )
  return result


def run_trainer(
  *flags: str,
  env: dict[str, str] | None = None,
  timeout: float = 300,
  check: bool = True,
  events: str | None = None,
) -> subprocess.CompletedProcess:
  """Runs `python -m trainer.task FLAGS` to completion (`run_command`).

  `events`: a file for the run's progress events (`CTL_EVENTS`), or None.
  """
  env = env or trainer_env()
  if events:
    env = {**env, ctl_env.EVENTS: events}
  return run_command(
    trainer_command(*flags), env=env, timeout=timeout, check=check
  )


def start(
  command: list[str], *, events: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
  """Starts `command` from the checkout with `CTL_EVENTS=events`.

  Its output (stdout and stderr together) goes to a temporary file, not a
  pipe, so a caller that follows the events file instead never blocks the
  process on a full pipe; `finish` returns it.
  """
  output = tempfile.TemporaryFile("w+")
  process = subprocess.Popen(
    command,
    cwd=REPO,
    env={**(env or trainer_env()), ctl_env.EVENTS: events},
    stdout=output,
    stderr=subprocess.STDOUT,
    text=True,
  )
  process.output_file = output
  return process


def start_until_step(
  command: list[str],
  *,
  events: str,
  step: int,
  env: dict[str, str] | None = None,
) -> subprocess.Popen:
  """`start`s `command`; returns once worker 0 has trained to `step`.

  Raises:
    AssertionError: it exited first (`events_lib.wait_for_step`).
  """
  process = start(command, events=events, env=env)
  events_lib.wait_for_step(events, step, process=process)
  return process


def output_so_far(process: subprocess.Popen) -> str:
  """What a process from `start` has written so far (it may still run)."""
  fd = process.output_file.fileno()
  return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")


def finish(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
  """Waits for a process from `start`; its exit code and whole output."""
  process.wait(timeout=timeout)
  process.output_file.seek(0)
  output = process.output_file.read()
  process.output_file.close()
  return process.returncode, output


@contextlib.contextmanager
def killed_at_exit(processes: list[subprocess.Popen]):
  """Yields `processes` (from `start`); SIGKILLs and reaps those still running.

  At the end of the block, passed or failed, so a test leaves no process
  behind (an agent or launcher takes its workers with it).
  """
  try:
    yield processes
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
        finish(process)


def stall_on_frozen_upload(
  command: list[str], emulator, *, events: str, env: dict[str, str]
) -> str:
  """`start`s `command`, which stalls on an upload the emulator freezes on.

  `emulator` (a `ctl.testing.gcs_emulator.GcsEmulator`) was restarted with
  `freeze_on_upload`; once it froze, the run must end on its own as a stall.
  The emulator is resumed and the run killed whatever happens.

  Returns:
    The run's output.

  Raises:
    AssertionError: it exited with another code than a stall's.
  """
  process = start(command, events=events, env=env)
  try:
    emulator.wait_until_frozen(timeout_s=240)
    code, output = finish(process)
  finally:
    process.kill()
    emulator.resume()
  assert code == STALL_EXIT_CODE, output[-3000:]
  return output


def train_to_summary(
  *flags: str, model_dir: str, env: dict[str, str] | None = None
) -> dict:
  """Runs the trainer into `model_dir` to its end; returns its summary."""
  run_trainer(*flags, f"--model_dir={model_dir}", env=env)
  return read_summary(model_dir)


def trained_model_dir(tmp_path_factory, name: str, *flags: str) -> str:
  """Trains a run to its end in a fresh `<tmp>/<name>/run`; returns the dir.

  The shape of a module-scoped fixture: one finished run that several tests
  read or copy (`tmp_path_factory` is pytest's).
  """
  model_dir = str(tmp_path_factory.mktemp(name) / "run")
  run_trainer(*flags, f"--model_dir={model_dir}")
  return model_dir


def kill_at_steps_then_finish(
  flags, *, model_dir: str, steps, env: dict[str, str] | None = None
) -> dict:
  """SIGKILLs a run once it reaches each of `steps`, re-runs it to the end.

  The run's events go to `<model_dir>.events.jsonl`.

  Returns:
    The summary of the run that finished.
  """
  events = f"{model_dir}.events.jsonl"
  for kill_at in steps:
    process = start_until_step(
      trainer_command(*flags, f"--model_dir={model_dir}"),
      events=events,
      step=kill_at,
      env=env,
    )
    process.kill()
    finish(process)
  return train_to_summary(*flags, model_dir=model_dir, env=env)
