"""Kill, preempt, corrupt, diverge: the job still ends with the same weights.

Every test uses real processes and real signals. Runs are `--deterministic`
and the model has Dropout, so an exact resume must restore the model, the
optimizer, the global step, the data position and the RNG state.
"""

import json
import os
import random
import signal
import subprocess
import time

import psutil
import pytest

from ctl.telemetry import ledger_reader
from ctl.testing import events as events_lib
from tests.conftest import FAST_FLAGS
from tests.conftest import free_ports
from tests.conftest import read_summary
from tests.conftest import run_trainer
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from trainer.testing import RESUME_FLAGS
from trainer.testing import finish
from trainer.testing import kill_at_steps_then_finish
from trainer.testing import launch_command
from trainer.testing import start
from trainer.testing import start_until_step
from trainer.testing import train_to_summary

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

STEPS = 60
FLAGS = (*FAST_FLAGS, *RESUME_FLAGS, f"--train_steps={STEPS}")
PREEMPTED = 143


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The uninterrupted run's summary."""
  model_dir = str(tmp_path_factory.mktemp("reference") / "run")
  return train_to_summary(*FLAGS, model_dir=model_dir)


def test_sigkill_twice_then_resume_is_bitwise_identical(
  reference, model_dir, tmp_path
):
  rng = random.Random()
  first = rng.choice(range(10, 35, 5))
  second = rng.choice(range(first + 5, STEPS - 5, 5))
  tmp = tmp_path / "tmp"
  tmp.mkdir()
  summary = kill_at_steps_then_finish(
    FLAGS,
    model_dir=model_dir,
    steps=(first, second),
    env=trainer_env(TMPDIR=str(tmp)),
  )
  assert summary["final_step"] == STEPS
  assert summary["restores"] >= 1
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"], (
    f"killed at steps {first} and {second}"
  )
  # Nothing of the killed workers is left in their temporary directory but
  # what the next start keeps (its tier, its ports): no AutoGraph file.
  assert [n for n in os.listdir(tmp) if "autograph" in n] == []


def test_async_checkpoints_do_not_change_the_result(reference, model_dir):
  run_trainer(
    *FLAGS,
    "--async_checkpoint",
    "--keep_checkpoints=2",
    f"--model_dir={model_dir}",
  )
  assert (
    read_summary(model_dir)["weights_fingerprint"]
    == (reference["weights_fingerprint"])
  )
  names = os.listdir(os.path.join(model_dir, "checkpoints"))
  assert {n.split(".")[0] for n in names if n != "checkpoint"} == {
    "ckpt-50",
    "ckpt-60",
  }


def test_truncated_latest_checkpoint_restores_the_previous(model_dir):
  flags = (*FLAGS, "--train_steps=40", f"--model_dir={model_dir}")
  run_trainer(*flags)
  data = os.path.join(model_dir, "checkpoints", "ckpt-40.data-00000-of-00001")
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)
  events = f"{model_dir}.events.jsonl"
  result = run_trainer(*flags, events=events)
  assert "ckpt-40 is unreadable" in result.stderr
  assert events_lib.restored_steps(events) == [30]
  assert read_summary(model_dir)["final_step"] == 40


def test_nan_at_one_step_rolls_back_and_ends_identical(reference, model_dir):
  result = run_trainer(
    *FLAGS, f"--model_dir={model_dir}", env=trainer_env(faults="nan@23")
  )
  assert "Loss not finite at step 23" in result.stderr
  assert "fault: injecting nan in the step at step 23" in result.stderr
  (attempt,) = ledger_reader.read(ledger_reader.ledger_dir(model_dir))
  assert [
    (e["fault"], e["at_step"]) for e in attempt if e["event"] == "fault"
  ] == [("nan", 23)]
  summary = read_summary(model_dir)
  assert summary["nan_recoveries"] == 1
  assert summary["final_step"] == STEPS
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]


def test_faults_without_their_switch_are_ignored_with_one_warning(model_dir):
  """A CTL_FAULTS left in a shell or a container spec breaks no real job."""
  env = trainer_env(CTL_FAULTS="crash@10")
  result = run_trainer(*FLAGS, f"--model_dir={model_dir}", env=env)
  assert read_summary(model_dir)["final_step"] == STEPS
  said = [line for line in result.stderr.splitlines() if "CTL_FAULTS" in line]
  assert len(said) == 1 and "CTL_FAULTS=crash@10 is ignored" in said[0], said
  assert "fault:" not in result.stderr


def test_nan_at_every_step_stops_without_saving_it(model_dir):
  result = run_trainer(
    *FLAGS,
    "--max_nan_recoveries=2",
    f"--model_dir={model_dir}",
    check=False,
    env=trainer_env(faults="nan@*"),
  )
  assert result.returncode == 1
  last = result.stderr.strip().splitlines()[-1]
  assert (
    last.startswith("error: The loss was not finite") and "2 rollbacks" in last
  )
  assert "Traceback" not in result.stderr
  names = os.listdir(os.path.join(model_dir, "checkpoints"))
  assert {n.split(".")[0] for n in names if n != "checkpoint"} == {"ckpt-0"}
  assert not os.path.exists(os.path.join(model_dir, "saved_model"))


def test_sigterm_to_one_worker_saves_both_at_one_step(model_dir):
  ports = free_ports(2)
  cluster = {"worker": [f"localhost:{p}" for p in ports]}
  flags = (
    *FLAGS,
    "--train_steps=2000",
    "--checkpoint_every_steps=1000",
    f"--model_dir={model_dir}",
  )
  events = f"{model_dir}.events.jsonl"
  workers = [
    start(
      trainer_command(*flags),
      events=events,
      env=trainer_env(
        TF_CONFIG=json.dumps(
          {"cluster": cluster, "task": {"type": "worker", "index": i}}
        )
      ),
    )
    for i in range(2)
  ]
  events_lib.wait_for_step(events, 10, process=workers[0])
  workers[1].send_signal(signal.SIGTERM)
  for code, output in [finish(w) for w in workers]:
    assert code == PREEMPTED, output[-3000:]
  stopped_at = [events_lib.ended_step(events, worker=i) for i in range(2)]
  assert stopped_at[0] == stopped_at[1]
  step = stopped_at[0]
  assert 10 <= step < 2000
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
  assert latest.endswith(f"ckpt-{step}")  # The re-run loses 0 steps.
  again = f"{model_dir}.again.jsonl"
  run_trainer(
    *FLAGS,
    f"--train_steps={step + 5}",
    f"--model_dir={model_dir}",
    events=again,
  )
  assert events_lib.restored_steps(again) == [step]


def test_launcher_restarts_two_workers_after_a_kill(tmp_path):
  flags = (*FLAGS, "--per_replica_batch_size=16", "--dropout=0")

  def launch(model_dir):
    return start(
      launch_command(
        "--num_workers=2",
        "--max_restarts=3",
        "--restart_backoff_secs=0.5",
        trainer_flags=(*flags, f"--model_dir={model_dir}"),
      ),
      events=f"{model_dir}.events.jsonl",
    )

  clean = str(tmp_path / "clean")
  code, output = finish(launch(clean))
  assert code == 0, output[-3000:]

  killed = str(tmp_path / "killed")
  launcher = launch(killed)
  kill_at = random.Random().choice(range(15, 45, 5))
  events_lib.wait_for_step(f"{killed}.events.jsonl", kill_at, process=launcher)
  victim = _worker_process(launcher.pid, index=1)
  victim.send_signal(signal.SIGKILL)
  code, output = finish(launcher)
  assert code == 0, output[-3000:]
  assert "restart 1/3" in output
  summary, reference = read_summary(killed), read_summary(clean)
  assert summary["restarts"] == 1
  assert summary["final_step"] == STEPS
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"], (
    f"worker 1 killed at step {kill_at}"
  )


def _worker_process(launcher_pid: int, *, index: int) -> psutil.Process:
  """The trainer process the launcher started with TF_CONFIG task `index`."""
  for child in psutil.Process(launcher_pid).children(recursive=True):
    try:
      tf_config = child.environ().get("TF_CONFIG")
    except psutil.Error:
      continue
    if (
      tf_config
      and json.loads(tf_config)["task"]["index"] == index
      and ("trainer.task" in " ".join(child.cmdline()))
    ):
      return child
  raise AssertionError(f"no worker {index} under launcher {launcher_pid}")


def _ctrl_c_at_step_10(
  model_dir, *flags, faults: str = ""
) -> tuple[subprocess.Popen, str]:
  """A long run of FLAGS + `flags`, sent SIGINT once it reaches step 10:
  (the process, its events file). `faults`: its CTL_FAULTS."""
  events = f"{model_dir}.events.jsonl"
  process = start_until_step(
    trainer_command(
      *FLAGS, "--train_steps=100000", *flags, f"--model_dir={model_dir}"
    ),
    events=events,
    step=10,
    env=trainer_env(faults=faults),
  )
  process.send_signal(signal.SIGINT)
  return process, events


def test_ctrl_c_saves_at_the_next_loop_and_exits_130(model_dir):
  process, events = _ctrl_c_at_step_10(
    model_dir, "--checkpoint_every_steps=1000"
  )
  code, output = finish(process)
  assert code == 128 + signal.SIGINT, output[-3000:]
  assert "Traceback" not in output and "KeyboardInterrupt" not in output
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
  assert latest.endswith(f"ckpt-{events_lib.ended_step(events)}")


def _wait_until_taken(process: subprocess.Popen, signum: int) -> None:
  """Waits until no thread of `process` has `signum` pending any more.

  A standard signal does not queue: one sent while the same one is still
  pending (no thread of a busy process has run yet to take it) merges into
  it. Once taken (the pending bits of /proc/PID/status clear), the next one
  sent is a signal of its own.
  """
  bit = 1 << (signum - 1)
  deadline = time.monotonic() + 60
  while process.poll() is None:
    with open(f"/proc/{process.pid}/status") as f:
      pending = [
        int(line.split()[1], 16)
        for line in f
        if line.startswith(("SigPnd:", "ShdPnd:"))
      ]
    if not any(mask & bit for mask in pending):
      return
    if time.monotonic() > deadline:
      raise AssertionError(f"signal {signum} still pending after 60 s")
    time.sleep(0.01)


def test_a_second_ctrl_c_exits_at_once(model_dir):
  # The loop of steps 10-20 waits 30 s for the input of step 15: the signals
  # come while the compiled loop runs, when Python runs no signal handler.
  process, _ = _ctrl_c_at_step_10(
    model_dir,
    "--steps_per_loop=10",
    "--log_every_steps=10",
    "--checkpoint_every_steps=0",
    faults="stall@15:input:secs=30",
  )
  _wait_until_taken(process, signal.SIGINT)
  process.send_signal(signal.SIGINT)
  code, output = finish(process, timeout=60)
  assert code == 128 + signal.SIGINT, output[-3000:]
  assert output.strip().splitlines()[-1] == (
    "error: interrupted twice; exiting without saving."
  ), output[-3000:]
  assert "Traceback" not in output and "saving the checkpoint" not in output
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
  assert latest.endswith("ckpt-0")  # The start; nothing saved on the way out.
