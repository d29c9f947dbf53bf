"""A wall clock that steps (NTP, VM migration) changes no interval of a run.

The trainer and the launcher run on a wall clock the test moves by an hour
in the middle of the run (`ctl.testing.clock`, an LD_PRELOAD library that
shifts CLOCK_REALTIME only, as a real step does). Time-based checkpoints must
keep their cadence and the launcher's heartbeat check must not mistake the
step for a frozen worker: every interval and deadline is on the monotonic
clock.
"""

import re
import sys
import time

import pytest

from ctl.testing import clock
from ctl.testing import events as events_lib
from tests.conftest import FAST_FLAGS
from tests.conftest import read_summary
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from trainer.testing import finish
from trainer.testing import launch_command
from trainer.testing import run_command
from trainer.testing import start

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

HOUR = 3600
STEPS = 60
# One step per loop, each loop at least 0.2 s late (ctl.resilience.faults `slow`): the
# run trains for 12 s or more, whatever the machine.
FLAGS = (
  *FAST_FLAGS,
  f"--train_steps={STEPS}",
  "--steps_per_loop=1",
  "--log_every_steps=10",
  "--eval_every_steps=0",
  "--checkpoint_every_steps=0",
  "--checkpoint_every_secs=2",
)
SLOW = "slow@*:secs=0.2"
JUMP_AT = 15


def _saves(events_file: str) -> list[int]:
  """The steps of the checkpoint saves that ended, in order."""
  return [
    e["step"]
    for e in events_lib.read_events(events_file)
    if e["phase"] == "checkpoint_save" and e["seconds"] is not None
  ]


def _save_after(events: str, step: int, process) -> int:
  """Waits for a checkpoint save to end after `step`; returns its step."""
  return events_lib.wait_for_event(
    events,
    lambda e: (
      e["phase"] == "checkpoint_save"
      and e["seconds"] is not None
      and e["step"] > step
    ),
    process=process,
  )["step"]


def _run_with_a_jump(
  command, *, tmp_path, seconds: int, faults: str = SLOW, after: float = 0
) -> tuple[str, str]:
  """Runs `command`, stepping its wall clock by `seconds` `after` seconds
  after a train loop starts at step JUMP_AT or later."""
  wall = clock.WallClock(str(tmp_path))
  events = str(tmp_path / "events.jsonl")
  process = start(
    command, events=events, env=trainer_env(faults=faults, **wall.env())
  )
  events_lib.wait_for_event(
    events,
    lambda e: (
      e["phase"] == "train_loop"
      and e["seconds"] is None
      and e["step"] >= JUMP_AT
    ),
    process=process,
  )
  time.sleep(after)
  wall.jump(seconds)
  if seconds < 0:
    # Two time-based saves after the step back show the cadence; then the
    # clock is set right again. TensorFlow's own timed waits (tf.data's
    # threads) hold deadlines on the wall clock: one armed before a step
    # back would keep the process from exiting for the hour.
    first = _save_after(events, JUMP_AT, process)
    _save_after(events, first, process)
    wall.jump(0)
  code, output = finish(process)
  assert code == 0, output[-3000:]
  return events, output


@pytest.fixture(scope="module")
def stepped_back(tmp_path_factory):
  """A run whose wall clock steps back an hour mid-run and is set right.

  Returns:
    (model_dir, events file, the seconds the test saw the run take on its
    own monotonic clock).
  """
  tmp_path = tmp_path_factory.mktemp("stepped_back")
  model_dir = tmp_path / "run"
  started = time.monotonic()
  events, _ = _run_with_a_jump(
    trainer_command(*FLAGS, f"--model_dir={model_dir}"),
    tmp_path=tmp_path,
    seconds=-HOUR,
  )
  return model_dir, events, time.monotonic() - started


def test_time_based_saves_keep_their_cadence_when_the_clock_steps_back(
  stepped_back,
):
  model_dir, events, _ = stepped_back
  saves = _saves(events)
  # At least 45 loops of 0.2 s after the step back: 9 s, 2 s apart. A wall
  # clock interval would wait an hour and save only at the final step.
  after_the_step = [s for s in saves if JUMP_AT < s < STEPS]
  assert len(after_the_step) >= 2, saves
  assert read_summary(model_dir)["final_step"] == STEPS


def test_the_run_record_stays_true_when_the_clock_steps_back(stepped_back):
  # It said "Goodput 49.3% of 10.1 s" for a 37 s run; ctl-report failed
  # with a ValueError, and with --png= printed negative seconds.
  model_dir, events, seen = stepped_back
  ended = [e for e in events_lib.read_events(events) if e["seconds"]]
  [run] = [e for e in ended if e["phase"] == "run"]
  loops = sum(e["seconds"] for e in ended if e["phase"] == "train_loop")
  accounting = read_summary(model_dir)["goodput"]
  # The ledger counts from the process start, before ctl.run began.
  assert run["seconds"] <= accounting["total_seconds"] <= seen
  assert min(accounting["seconds"].values()) >= 0
  # Train loops are goodput, and so is the bookkeeping between two of them
  # (the ledger rounds each time to 1 ms).
  assert accounting["seconds"]["goodput"] >= loops - 0.01
  for png in ("--png=", f"--png={model_dir}/timeline.png"):
    result = run_command(
      [sys.executable, "-m", "ctl.report", str(model_dir), png], check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    first = result.stdout.splitlines()[0]
    said = re.fullmatch(
      r"Goodput ([\d.]+)% of ([\d.]+) s wall time; 1 start\(s\), "
      r"0 failure\(s\), 0 step\(s\) trained twice; final step 60\..*",
      first,
    )
    assert said, first
    # The same accounting: the report rounds to 0.1 and the summary keeps
    # 0.01 % and 1 ms, so 61.35 % (61.3496 unrounded) is said as 61.3.
    percent, seconds = map(float, said.groups())
    assert abs(percent - accounting["goodput_percent"]) <= 0.05 + 0.005, first
    assert abs(seconds - accounting["total_seconds"]) <= 0.05 + 0.0005, first
    assert not re.search(r" -\d", result.stdout), result.stdout


def test_the_launcher_does_not_take_a_forward_step_for_a_frozen_worker(
  tmp_path,
):
  model_dir = tmp_path / "run"
  command = launch_command(
    "--num_workers=1",
    "--max_restarts=2",
    "--restart_backoff_secs=0.5",
    "--heartbeat_grace_secs=5",
    trainer_flags=(
      *FLAGS,
      "--stall_timeout_secs=60",
      f"--model_dir={model_dir}",
    ),
  )
  # The loop that starts at JUMP_AT waits 12 s for its batch (under the
  # 60 s limit): its heartbeat (written within the watchdog's 1 s poll) is
  # from before the step, and no other is written until well after it.
  events, output = _run_with_a_jump(
    command,
    tmp_path=tmp_path,
    seconds=HOUR,
    faults=f"{SLOW},stall@{JUMP_AT + 1}:input:secs=12",
    after=3,
  )
  # A wall clock deadline is an hour overdue after the step: the launcher
  # would stop the worker as frozen and restart it.
  assert "did not act" not in output, output[-3000:]
  summary = read_summary(model_dir)
  assert summary["restarts"] == 0
  assert summary["final_step"] == STEPS
  assert events_lib.restored_steps(events) == [0]
