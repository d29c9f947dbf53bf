"""ctl.launch.launcher: `ctl-launch`'s command line and its exit status, with
real worker processes (the restart loop, signals and stalls of whole runs:
tests/test_launch.py and tests/test_agent.py)."""

import signal
import subprocess
import sys

import pytest
import tensorflow as tf

from ctl import env
from ctl import errors
from ctl.launch import launcher
from tests.conftest import REPO
from tests.conftest import trainer_env
from trainer.testing import FAST_FLAGS
from trainer.testing import finish
from trainer.testing import launch_command
from trainer.testing import start_until_step


def _launch(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", "ctl.launch", *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  )


@pytest.mark.processes
def test_the_launcher_exits_with_the_code_of_the_worker_that_failed():
  result = _launch(
    "--num_workers=2",
    "--",
    sys.executable,
    "-c",
    "import json, os, sys;"
    " sys.exit(3 if json.loads(os.environ['TF_CONFIG'])['task']['index'] else 0)",
  )
  assert result.returncode == 3, result.stderr[-3000:]


@pytest.mark.processes
def test_every_worker_gets_its_own_rank_and_its_output_is_prefixed():
  result = _launch(
    "--num_workers=2",
    "--",
    sys.executable,
    "-c",
    "import json, os; print(json.loads(os.environ['TF_CONFIG'])['task'])",
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert sorted(result.stdout.splitlines()) == [
    "[worker 0] {'type': 'worker', 'index': 0}",
    "[worker 1] {'type': 'worker', 'index': 1}",
  ]


@pytest.mark.processes
def test_a_command_that_cannot_start_is_one_sentence_and_exit_2():
  result = _launch("--num_workers=1", "--", "/no/such/program")
  assert result.returncode == errors.USER_ERROR_EXIT_CODE, result.stderr
  assert result.stderr.startswith("error: ")
  assert len(result.stderr.splitlines()) == 1, result.stderr


def test_the_command_is_what_follows_the_double_dash():
  options = launcher._parse_args(
    ["--num_workers=2", "--max_restarts=1", "--", "python", "-m", "x", "--y"]
  )
  assert options.command == ("python", "-m", "x", "--y")
  assert (options.num_workers, options.max_restarts) == (2, 1)


def test_the_node_agent_on_vertex_stops_its_trainer_before_the_vm_stops():
  # The entrypoint docs/fault-tolerance.md shows for Vertex AI: a Spot VM is
  # stopped 30 s after its preemption notice; the agent must leave the
  # trainer most of it for the agreed save, and itself time to exit.
  agent = launcher._parse_args(
    ["--agent", "--max_restarts=3", "--", "python", "-m", "trainer.task"]
  )
  local = launcher._parse_args(["--num_workers=2", "--", "true"])

  assert agent.grace_secs == (
    launcher.PREEMPTION_NOTICE_SECS - launcher.AGENT_GRACE_MARGIN_SECS
  )
  assert launcher.PREEMPTION_NOTICE_SECS == 30
  assert 0 < launcher.AGENT_GRACE_MARGIN_SECS < 10
  assert local.grace_secs == launcher.LaunchOptions.grace_secs


@pytest.mark.parametrize(("grace_secs", "saved"), [(50, True), (5, False)])
@pytest.mark.processes
def test_the_node_agent_lets_a_long_agreed_save_finish_within_its_grace(
  grace_secs, saved, tmp_path
):
  """SIGTERM to the node agent: its trainer's agreed save takes 20 s (an
  injected stall in the save); a grace that allows it lets it commit (exit
  143, the step saved), and one that does not ends it first (step 0's
  checkpoint the newest). The test of the grace, as a Spot VM gives it."""
  model_dir, events = tmp_path / "run", str(tmp_path / "events.jsonl")
  agent = start_until_step(
    launch_command(
      "--agent",
      f"--grace_secs={grace_secs}",
      "--max_restarts=0",
      trainer_flags=(
        *FAST_FLAGS,
        "--train_steps=100000",
        "--checkpoint_every_steps=100000",
        "--local_checkpoints=off",
        f"--model_dir={model_dir}",
      ),
    ),
    events=events,
    step=10,
    env=trainer_env(faults="stall@5:checkpoint_save:secs=20"),
  )
  agent.send_signal(signal.SIGTERM)
  code, output = finish(agent)
  assert code == 128 + signal.SIGTERM, output[-3000:]
  newest = tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
  assert (not newest.endswith("ckpt-0")) == saved, output[-3000:]


def test_a_blank_job_id_gets_a_new_one():
  """A blank CTL_JOB_ID is no job id: every start of this launcher gets a
  new one, not " ", which a separate command left with " " would share."""
  drawn = launcher.job_id(agent=False, environ={env.JOB_ID: " "})
  assert drawn.strip() and drawn != launcher.job_id(
    agent=False, environ={env.JOB_ID: " "}
  )
  assert launcher.job_id(agent=True, environ={env.JOB_ID: " job-7"}) == "job-7"
