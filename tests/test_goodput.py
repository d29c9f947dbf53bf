"""The run ledger and goodput accounting on real runs, kills and restarts.

One job runs under `ctl.launch --max_restarts=2`; the test SIGKILLs its
trainer twice at steps it reads from the ledger (the worker is frozen with
SIGSTOP first, so what the test reads is what the process had done), and
checks the ledger's accounting against what it did.
"""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.recovery import goodput_lib
from benchmarks.recovery import goodput_model_lib
from ctl import report
from ctl.io import storage
from ctl.telemetry import goodput
from ctl.telemetry import ledger_reader
from ctl.testing.gcs_emulator import GcsEmulator
from tests.conftest import FAST_FLAGS
from tests.conftest import REPO
from tests.conftest import read_scalars
from tests.conftest import read_summary
from tests.conftest import run_trainer
from tests.conftest import trainer_env
from tests.conftest import wait_for_attempt
from trainer.testing import launch_command
from trainer.testing import run_command

STEPS = 200
FLAGS = (
  *FAST_FLAGS,
  "--deterministic",
  f"--train_steps={STEPS}",
  "--steps_per_loop=5",
  "--log_every_steps=5",
  "--checkpoint_every_steps=20",
  "--eval_every_steps=0",
  "--checkpoint_every_secs=0",
  # The bucket alone: a kill loses the steps since its newest checkpoint
  # (with the local tier, since the last loop; tests/test_checkpoint_tiers).
  "--local_checkpoints=off",
)
KILL_AT = (35, 110)
_LATEST = re.compile(r'^model_checkpoint_path: "ckpt-(\d+)"', re.MULTILINE)


def _attempts(model_dir):
  return ledger_reader.read(ledger_reader.ledger_dir(model_dir))


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
  """A job killed at KILL_AT and resumed by the launcher; what the test saw."""
  model_dir = str(tmp_path_factory.mktemp("killed") / "run")
  started = time.time()
  launcher = subprocess.Popen(
    launch_command(
      "--num_workers=1",
      "--max_restarts=2",
      "--restart_backoff_secs=0.5",
      trainer_flags=(*FLAGS, f"--model_dir={model_dir}"),
    ),
    cwd=REPO,
    env=trainer_env(),
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )
  expected_lost = []
  for index, kill_at in enumerate(KILL_AT):
    events = wait_for_attempt(model_dir, index, kill_at, launcher)
    pid = events[0]["pid"]
    os.kill(pid, signal.SIGSTOP)  # Frozen: the ledger and disk stay as read.
    recorded = max(
      e["step"] for e in _attempts(model_dir)[index] if e["event"] == "phase"
    )
    with open(os.path.join(model_dir, "checkpoints", "checkpoint")) as f:
      checkpointed = int(_LATEST.search(f.read()).group(1))
    expected_lost.append(recorded - checkpointed)
    os.kill(pid, signal.SIGKILL)
  output, _ = launcher.communicate(timeout=300)
  ended = time.time()
  assert launcher.returncode == 0, output[-3000:]
  return dict(
    model_dir=model_dir,
    expected_lost=expected_lost,
    started=started,
    ended=ended,
  )


@pytest.mark.processes
def test_killed_twice_the_accounting_adds_up(killed_run):
  attempts = _attempts(killed_run["model_dir"])
  accounting = goodput.account(attempts)
  assert len(accounting.attempts) == 3
  assert accounting.failures == 2
  assert [a.outcome for a in accounting.attempts] == [
    "killed by SIGKILL",
    "killed by SIGKILL",
    "done",
  ]
  assert [a.lost_steps for a in accounting.attempts[:2]] == (
    killed_run["expected_lost"]
  )
  assert accounting.lost_steps == sum(killed_run["expected_lost"])
  assert accounting.final_step == STEPS
  categories = sum(accounting.seconds.values())
  assert categories == pytest.approx(accounting.total_seconds, rel=0.02)
  # Every second from the first trainer's start to the last one's end event
  # is counted, once: the kills and restarts in between leave no hole. That
  # span lies inside the job as seen from outside (the launcher's own start
  # and the last process's exit are outside it, and take what the machine
  # makes them take).
  first, last = accounting.attempts[0], accounting.attempts[-1]
  assert accounting.total_seconds == pytest.approx(last.end - first.start)
  assert killed_run["started"] < first.start < last.end < killed_run["ended"]
  for category in (
    goodput.GOODPUT,
    goodput.STARTUP,
    goodput.RESTART_GAP,
    goodput.CHECKPOINT_SAVE,
    goodput.TRACING,
  ):
    assert accounting.seconds[category] > 0, category
  if accounting.lost_steps:
    assert accounting.seconds[goodput.LOST] > 0


@pytest.mark.processes
def test_the_goodput_models_inputs_come_from_the_killed_runs_ledger(
  killed_run,
):
  # benchmarks/recovery/goodput_model_lib checks the model against runs like this.
  model_dir = killed_run["model_dir"]
  # The ledger's restarts stand for the seconds to resume the bench times.
  parts = goodput_model_lib.restart_parts(model_dir)
  # As if each resumed loop ran 2 steps: they train, and come off.
  first_loop = sum(parts.values()) / len(KILL_AT)
  costs = goodput_model_lib.measured(
    model_dir,
    restarts=[(first_loop, 2)] * len(KILL_AT),
    save_every_steps=20,
  )
  assert set(parts) == {
    goodput.RESTART_GAP,
    goodput.STARTUP,
    goodput.RESTORE,
    goodput.TRACING,
  }
  assert parts[goodput.RESTART_GAP] > 0 and parts[goodput.STARTUP] > 0
  assert costs["restart_seconds"] == pytest.approx(
    first_loop - 2 * costs["step_seconds"]
  )
  # The fault window leaves out the first start-up and the final evaluation
  # and export, which a run without faults pays too.
  whole = goodput.account(_attempts(model_dir)).goodput_percent
  assert whole < costs["window_goodput_percent"] < 100
  assert costs["save_every_seconds"] == pytest.approx(
    20 * costs["step_seconds"] + costs["save_seconds"]
  )
  assert 0 <= goodput_model_lib.predicted(costs) < 100


@pytest.mark.processes
def test_summary_and_tensorboard_carry_goodput(killed_run):
  model_dir = killed_run["model_dir"]
  summary = read_summary(model_dir)["goodput"]
  assert summary["failures"] == 2
  assert summary["lost_steps"] == sum(killed_run["expected_lost"])
  scalars = read_scalars(os.path.join(model_dir, "tensorboard", "train"))
  [(step, percent)] = scalars["goodput/percent"]
  assert step == STEPS and percent == pytest.approx(
    summary["goodput_percent"], abs=0.01
  )


@pytest.mark.processes
def test_a_line_cut_short_by_a_crash_is_skipped(killed_run, tmp_path):
  directory = str(tmp_path / "ledger")
  shutil.copytree(ledger_reader.ledger_dir(killed_run["model_dir"]), directory)
  before = ledger_reader.read(directory)
  last = sorted(glob.glob(os.path.join(directory, "*.jsonl")))[-1]
  with open(last, "a") as f:
    f.write('{"event": "phase", "phase": "train_lo')
  after = ledger_reader.read(directory)
  assert after == before
  assert goodput.account(after).failures == 2


@pytest.mark.processes
def test_report_prints_the_table_and_draws_the_timeline(killed_run, tmp_path):
  png = str(tmp_path / "timeline.png")
  result = run_command(
    [
      sys.executable,
      "-m",
      "ctl.report",
      killed_run["model_dir"],
      f"--png={png}",
    ]
  )
  assert "killed by SIGKILL" in result.stdout
  assert "progress lost" in result.stdout and "restart gap" in result.stdout
  with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("make", [None, "empty"])
@pytest.mark.processes
def test_report_without_a_ledger_exits_2_in_one_sentence(tmp_path, make):
  model_dir = tmp_path / "run"
  if make:
    (model_dir / "ledger").mkdir(parents=True)
  result = run_command(
    [sys.executable, "-m", "ctl.report", str(model_dir)], check=False
  )
  assert result.returncode == 2
  assert result.stdout == ""
  [line] = result.stderr.splitlines()
  assert line.startswith("error: no run ledger in ") and line.endswith(".")


@pytest.mark.processes
def test_ledger_on_cloud_storage(gcs_emulator, tmp_path, capsys):
  model_dir = f"gs://{GcsEmulator.BUCKET}/run"
  result = run_trainer(
    *FAST_FLAGS,
    "--train_steps=20",
    "--storage=gcsfs",
    "--checkpoint_every_secs=auto",
    "--expected_mtbf_secs=3600",
    f"--model_dir={model_dir}",
    env=trainer_env(
      TMPDIR=str(tmp_path), STORAGE_EMULATOR_HOST=gcs_emulator.endpoint
    ),
  )
  [events] = _attempts(model_dir)
  assert events[-1]["event"] == "end" and events[-1]["step"] == 20
  path, fs = storage.read_route(model_dir, storage="gcsfs")
  chosen = json.loads(fs.cat_file(f"{path}/train_summary.json"))[
    "checkpoint_every_secs"
  ]
  assert 0 < chosen["seconds"] < 3600 and "3600 s" in chosen["why"]
  assert "checkpoint_every_secs=auto: every" in result.stderr
  report.main([model_dir, "--png="])  # In this process: TF loads once.
  assert "  done" in capsys.readouterr().out


def test_kill_schedule_is_seeded_increasing_and_an_epoch_apart():
  config = goodput_lib.Config(
    epochs=8, kills=2, kill_seed=3, checkpoint_every=20
  )
  kills = goodput_lib.kill_schedule(config, steps_per_epoch=44)
  assert kills == goodput_lib.kill_schedule(config, steps_per_epoch=44)
  assert 20 < kills[0] and kills[0] + 44 < kills[1] < 8 * 44


def test_time_between_a_finished_run_and_its_continuation_is_not_counted():
  def attempt(start, end, outcome):
    return [
      {"event": "start", "time": start},
      {"event": "end", "time": end, "step": 0, "outcome": outcome},
    ]

  continued = goodput.account(
    [attempt(0.0, 10.0, "done"), attempt(1000.0, 1010.0, "done")]
  )
  assert continued.total_seconds == pytest.approx(20.0)
  assert continued.seconds[goodput.RESTART_GAP] == 0
  preempted = goodput.account(
    [attempt(0.0, 10.0, "Preempted"), attempt(15.0, 25.0, "done")]
  )
  assert preempted.total_seconds == pytest.approx(25.0)
  assert preempted.seconds[goodput.RESTART_GAP] == pytest.approx(5.0)
  assert preempted.failures == 0


@pytest.mark.processes
def test_local_tier_saves_are_counted_as_checkpoint_saves(tmp_path):
  # Saves to the local tier block the steps like any save: the accounting
  # shows them as checkpoint_save seconds, not as bookkeeping ("other"),
  # and it counts them apart from the bucket's saves, whose mean cost
  # --checkpoint_every_secs=auto weighs.
  model_dir = str(tmp_path / "run")
  run_trainer(
    *FAST_FLAGS,
    "--train_steps=40",
    "--steps_per_loop=5",
    "--checkpoint_every_steps=20",
    f"--local_checkpoints={tmp_path / 'tier'}",
    "--local_checkpoint_every_steps=5",
    f"--model_dir={model_dir}",
  )
  attempts = ledger_reader.read(ledger_reader.ledger_dir(model_dir))
  phases = [e["phase"] for e in attempts[0] if e.get("event") == "phase"]
  # Steps 5, 10, 15, 25, 30, 35 go to the local tier only; 20 and 40 (and
  # the start's 0) to both.
  assert phases.count("local_checkpoint_save") == 6
  accounting = goodput.account(attempts)
  assert accounting.checkpoint_saves == phases.count("checkpoint_save")
  local = sum(
    e["t1"] - e["t0"]
    for e in attempts[0]
    if e.get("phase") == "local_checkpoint_save"
  )
  assert accounting.seconds[goodput.CHECKPOINT_SAVE] >= local > 0


def test_a_loop_that_failed_waiting_for_a_dead_peer_is_not_goodput():
  """The chief's last loop of an attempt that a peer's SIGKILL ended: it
  ran no step (its all-reduce waited 9 s for the dead peer, then failed,
  `ok: false`) after the local save of step 5, which the next attempt
  restored. Those 9 s are lost to the fault, as they are when the resumed
  step is older; the loop's step number (5, the resumed one) does not make
  them goodput. (Recorded from a killed run of the checkpoint-tiers bench,
  which then measured each kill 2.8 s cheaper than its restart.)"""

  def phase(name, t0, t1, step0, step, ok=True, **more):
    return {"event": "phase", "phase": name, "t0": t0, "t1": t1,
            "step0": step0, "step": step, "ok": ok, **more}  # fmt: skip

  killed = [
    {"event": "start", "time": 0.0},
    phase("startup", 0.0, 2.0, 0, 0),
    phase("train_loop", 2.0, 3.0, 0, 5, busy=1.0),
    phase("local_checkpoint_save", 3.0, 3.1, 5, 5),
    phase("train_loop", 3.1, 12.1, 5, 5, ok=False, busy=9.0),
    {"event": "end", "time": 12.2, "step": 5, "outcome": "UnavailableError"},
  ]
  resumed = [
    {"event": "start", "time": 13.0, "previous_exit_time": 12.2},
    phase("startup", 13.0, 15.0, 5, 5),
    phase("train_loop", 15.0, 16.0, 5, 10, busy=1.0),
    {"event": "end", "time": 16.0, "step": 10, "outcome": "done"},
  ]
  accounting = goodput.account([killed, resumed])
  assert accounting.seconds[goodput.GOODPUT] == pytest.approx(2.0)
  assert accounting.seconds[goodput.LOST] == pytest.approx(9.1)
  assert accounting.lost_steps == 0


def test_an_attempt_that_lost_a_peer_says_whom_not_the_tensorflow_error():
  """A partition or a lost node ends the chief's attempt with a `peer_lost`
  event (ctl.train.controller): its outcome names the worker and address,
  as ctl-report and train_summary.json show it."""
  cut = [
    {"event": "start", "time": 0.0},
    {"event": "phase", "phase": "startup", "t0": 0.0, "t1": 2.0, "step0": 0,
     "step": 0, "ok": True},
    {"event": "peer_lost", "time": 9.0, "step": 100,
     "peer": "lost contact with worker 1 (host-1:23500)"},
    {"event": "end", "time": 9.1, "step": 100, "outcome": "PeerLost"},
  ]  # fmt: skip
  resumed = [
    {"event": "start", "time": 20.0, "previous_exit": 75},
    {"event": "end", "time": 30.0, "step": 300, "outcome": "done"},
  ]
  first, _ = goodput.account([cut, resumed]).attempts
  assert first.outcome == "failed: lost contact with worker 1 (host-1:23500)"
  assert first.failed


def test_a_stalled_attempt_says_where_and_what_it_waited_in():
  """The watchdog's `stall` event (ctl.resilience.watchdog) names the phase,
  the step and, where it could see it, the library the stuck thread waited
  in: a bucket lost by the chief during its save reads as that, not as a
  bare "stalled"."""
  stalled = [
    {"event": "start", "time": 0.0},
    {"event": "phase", "phase": "startup", "t0": 0.0, "t1": 2.0, "step0": 0,
     "step": 0, "ok": True},
    {"event": "stall", "time": 30.0, "worker": 0, "phase": "checkpoint_save",
     "step": 150, "seconds": 20.1, "limit": 20.0,
     "flag": "--stall_timeout_secs", "doing": None,
     "waiting_in": "gcsfs, called from ctl/io/mirror.py:362 (object_generation)"},
  ]  # fmt: skip
  older = [dict(stalled[-1], waiting_in=None)]  # A ledger from before it.
  del older[0]["waiting_in"]
  resumed = [
    {"event": "start", "time": 40.0, "previous_exit": 75},
    {"event": "end", "time": 60.0, "step": 300, "outcome": "done"},
  ]
  first, second, _ = goodput.account(
    [stalled, [stalled[0], *older], resumed]
  ).attempts
  assert first.outcome == (
    "stalled in checkpoint_save at step 150, waiting in gcsfs, called from "
    "ctl/io/mirror.py:362 (object_generation)"
  )
  assert second.outcome == "stalled in checkpoint_save at step 150"
