"""Stalls: a worker that is alive but stuck never hangs the job.

Real trainer processes, real launcher, real signals; stalls come from
ctl.resilience.faults (`CTL_FAULTS`): a read that never returns in a worker's input
pipeline, a train loop that never ends, a frozen (SIGSTOP) process, a peer
that never starts.
"""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from ctl.telemetry import ledger_reader
from ctl.testing import events as events_lib
from tests.conftest import FAST_FLAGS
from tests.conftest import free_ports
from tests.conftest import read_summary
from tests.conftest import run_trainer
from tests.conftest import trainer_command
from tests.conftest import trainer_env
from tests.test_fault_tolerance import _worker_process
from trainer.testing import RESUME_FLAGS
from trainer.testing import finish
from trainer.testing import launch_command
from trainer.testing import output_so_far
from trainer.testing import run_command
from trainer.testing import start

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

STALL = 75
STEPS = 40
FLAGS = (
  *FAST_FLAGS,
  *RESUME_FLAGS,
  f"--train_steps={STEPS}",
  "--per_replica_batch_size=16",
  "--dropout=0",
  "--stall_timeout_secs=15",
)


def wait_for_output(process: subprocess.Popen, text: str) -> None:
  """Waits until the output of a process from `start` holds `text`."""
  while text not in output_so_far(process):
    if process.poll() is not None:
      raise AssertionError(f"exited before {text!r}")
    time.sleep(0.1)


def launch(model_dir, *, faults="", workers=2, max_restarts=3):
  return start(
    launch_command(
      f"--num_workers={workers}",
      f"--max_restarts={max_restarts}",
      "--restart_backoff_secs=0.5",
      "--grace_secs=5",
      trainer_flags=(*FLAGS, f"--model_dir={model_dir}"),
    ),
    events=f"{model_dir}.events.jsonl",
    env=trainer_env(faults=faults),
  )


def test_two_workers_survive_input_loop_and_sigstop_stalls(tmp_path):
  code, output = finish(launch(tmp_path / "clean"))
  assert code == 0, output[-3000:]
  reference = read_summary(tmp_path / "clean")

  # Attempt 0: worker 1's input read at step 10 never returns; attempt 1:
  # its train loop at step 20 never ends; attempt 2: it is frozen while its
  # loops are slowed down (so the job cannot end before it is frozen).
  model_dir = tmp_path / "stalled"
  launcher = launch(
    model_dir,
    faults="stall@10:input:worker=1:attempt=0,"
    "stall@20:loop:worker=1:attempt=1,"
    "slow@*:secs=2:worker=1:attempt=2",
  )
  events = f"{model_dir}.events.jsonl"
  # Attempt 2 reaches step 25 before worker 1 is frozen (the earlier
  # attempts stall before it).
  events_lib.wait_for_event(
    events,
    lambda e: e["attempt"] == 2 and e["worker"] == 0 and e["step"] >= 25,
    process=launcher,
  )
  _worker_process(launcher.pid, index=1).send_signal(signal.SIGSTOP)
  code, output = finish(launcher)
  assert code == 0, output[-3000:]

  for step, fault in ((10, "stall in input"), (20, "stall in train_loop")):
    assert f"[worker 1] fault: injecting {fault} at step {step}" in output
    assert re.search(
      rf"\[worker 1\] stall: worker 1 made no progress for \d+ "
      rf"s in train_loop at step {step}, waiting in \w+, called from "
      r"ctl/\S+ \(\w+\) \(limit 15 s, "
      r"--stall_timeout_secs\)",
      output,
    ), output[-5000:]
    assert re.search(
      rf"\[launcher\] worker \d stalled at step {step} in "
      r"train_loop \(exit code 75\)",
      output,
    )
  # The stuck worker's stacks: the blocked read and the blocked loop.
  assert "[worker 1]   File" in output and "in _at_input_step" in output
  assert re.search(r"\[worker 1\]   File .*controller.py.* in until", output)
  summary = read_summary(model_dir)
  assert summary["restarts"] == 3 and summary["final_step"] == STEPS
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]


def test_one_worker_stall_exits_75_repeats_are_reported_rerun_continues(
  tmp_path,
):
  model_dir = str(tmp_path / "run")
  # Bucket checkpoints only: with the local tier the restart would resume at
  # step 15 itself (saved at that loop's end) and meet the stall in its first
  # loop, under the start-up limit; this test is about the repeat at step 15.
  flags = (
    *FLAGS,
    "--stall_timeout_secs=8",
    "--local_checkpoints=off",
    f"--model_dir={model_dir}",
  )
  events = f"{model_dir}.stalled.jsonl"
  stalled = run_trainer(
    *flags, env=trainer_env(faults="stall@15"), events=events, check=False
  )
  assert stalled.returncode == STALL, stalled.stderr[-3000:]
  # The events file shows when: the run ended by the stall, before exit.
  (ended,) = [
    e
    for e in events_lib.read_events(events)
    if e["phase"] == "run" and e["seconds"] is not None
  ]
  assert (ended["ok"], ended["error"], ended["step"]) == (False, "Stalled", 15)
  assert re.search(
    r"stall: worker 0 made no progress for \d+ s in train_loop "
    # The injected stall waits on an event (what the stuck thread waits in).
    r"at step 15, waiting in threading, called from "
    r"ctl/resilience/faults.py:\d+ \(_fire\) "
    r"\(limit 8 s, --stall_timeout_secs\); stacks "
    "of all threads follow; exiting with 75.",
    stalled.stderr,
  )
  assert "Thread 0x" in stalled.stderr  # faulthandler's stacks.

  # The same stall under the launcher, which restarts once and gives up.
  repeated = run_command(
    launch_command(
      "--num_workers=1",
      "--max_restarts=1",
      "--restart_backoff_secs=0",
      trainer_flags=flags,
    ),
    env=trainer_env(faults="stall@15"),
    check=False,
  )
  assert repeated.returncode == STALL, repeated.stderr[-3000:]
  assert (
    "[launcher] worker 0 stalled twice at step 15 in train_loop (exit "
    "code 75); the stall is not transient"
  ) in repeated.stderr
  assert (
    "[launcher] giving up: worker 0 stalled twice at step 15 in "
    "train_loop and all 1 restart(s) (--max_restarts) are used"
  ) in repeated.stderr

  rerun = f"{model_dir}.rerun.jsonl"
  run_trainer(*flags, events=rerun)
  assert events_lib.restored_steps(rerun) == [10]
  summary = read_summary(model_dir)
  assert summary["final_step"] == STEPS
  # The run ledger holds each stall where the watchdog saw it.
  stalls = [
    event
    for attempt in ledger_reader.read(ledger_reader.ledger_dir(model_dir))
    for event in attempt
    if event["event"] == "stall"
  ]
  assert [(e["phase"], e["step"], e["worker"]) for e in stalls] == [
    ("train_loop", 15, 0)
  ] * 3
  assert [a["outcome"] for a in summary["goodput"]["attempts"]][:3] == [
    "stalled in train_loop at step 15, waiting in threading, called from "
    f"ctl/resilience/faults.py:{stalls[0]['waiting_in'].rsplit(':', 1)[1]}"
  ] * 3


def test_a_peer_that_never_starts_is_named_awaited_and_given_up_on(tmp_path):
  # Each says whom it waits for every 10 s. `giving_up`'s 20 s limit leaves
  # it 10 s to say so before it gives up; `terminated`'s 600 s limit cannot
  # end it before the test, having seen that line, sends SIGTERM.
  ports = free_ports(4)

  def first_of_two(ports, limit):  # Worker 1 never starts.
    return start(
      trainer_command(
        *FLAGS,
        f"--startup_timeout_secs={limit}",
        f"--model_dir={tmp_path / 'run'}",
      ),
      events=str(tmp_path / "events.jsonl"),
      env=trainer_env(
        TF_CONFIG=json.dumps(
          {
            "cluster": {"worker": [f"localhost:{p}" for p in ports]},
            "task": {"type": "worker", "index": 0},
          }
        )
      ),
    )

  giving_up = first_of_two(ports[:2], limit=20)
  terminated = first_of_two(ports[2:], limit=600)
  wait_for_output(terminated, f"for worker 1 (localhost:{ports[3]}) to start")
  terminated.send_signal(signal.SIGTERM)
  assert terminated.wait(timeout=60) == -signal.SIGTERM  # At once.

  awaited = f"worker 1 (localhost:{ports[1]})"
  code, output = finish(giving_up)
  assert code == STALL, output[-3000:]
  assert f"s so far for {awaited} to start (limit 20 s" in output
  last = output.strip().splitlines()[-1]
  assert last == (
    f"error: gave up after 20 s (--startup_timeout_secs) "
    f"waiting for {awaited} of TF_CONFIG to start; start it or "
    "fix TF_CONFIG, then run again."
  )


# Listing data is progress (issue 20, item 6): the file list of a files
# dataset is built with each directory followed once and each file read
# marked, so the steady --stall_timeout_secs applies and names the file.
def _image_dir(root):
  """12 real PNG images in two classes."""
  from PIL import Image  # pylint: disable=g-import-not-at-top

  for index in range(12):
    directory = root / ("a_red" if index < 6 else "b_blue")
    directory.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (index * 20, 0, 200 - index * 10)).save(
      directory / f"{index:02d}.png"
    )
  return root


_FILES_FLAGS = (
  *FAST_FLAGS,
  "--dataset=files",
  "--per_replica_batch_size=4",
  "--train_steps=10",
)


def test_two_symlink_loops_in_the_data_dir_are_listed_once_and_named(
  tmp_path,
):
  data_dir = _image_dir(tmp_path / "images")
  # Each level of a naive walk doubles: 2**40 paths before ELOOP stops it.
  (data_dir / "a_red" / "up").symlink_to(data_dir)
  (data_dir / "b_blue" / "back").symlink_to("..")
  result = run_trainer(
    *_FILES_FLAGS,
    f"--data_dir={data_dir}",
    f"--model_dir={tmp_path / 'run'}",
    timeout=240,
  )
  for link in ("a_red/up", "b_blue/back"):
    assert (
      f"{data_dir}/{link} leads to {data_dir}, a directory already listed"
    ) in result.stderr, result.stderr[-3000:]
  with open(tmp_path / "run" / "checkpoints" / "data_manifest.json") as f:
    assert len(json.load(f)["files"]) == 12


def test_a_read_that_blocks_while_listing_is_a_stall_that_names_the_file(
  tmp_path,
):
  data_dir = _image_dir(tmp_path / "images")
  fifo = data_dir / "b_blue" / "99.png"
  os.mkfifo(fifo)  # Opening it for reading blocks until a writer comes.
  result = run_trainer(
    *_FILES_FLAGS,
    "--stall_timeout_secs=10",
    f"--data_dir={data_dir}",
    f"--model_dir={tmp_path / 'run'}",
    timeout=240,
    check=False,
  )
  assert result.returncode == STALL, result.stderr[-3000:]
  stall = [line for line in result.stderr.splitlines() if "stall:" in line]
  assert len(stall) == 1, result.stderr[-3000:]
  assert "in data_listing" in stall[0] and f"reading {fifo}" in stall[0]
  assert "--stall_timeout_secs" in stall[0]


def test_a_trainer_stopped_past_its_limit_then_continued_exits_75(tmp_path):
  # Ctrl-Z past the limit, then `fg`: faulthandler's C watchdog (armed for
  # 10 s after the deadline) woke with the watchdog thread and ended the
  # run with exit 1; a stall is 75, which a supervisor restarts. The stop
  # lands in a train loop or between two (the watchdog gave the time
  # between loops the 900 s start-up limit, and the run went on).
  model_dir = str(tmp_path / "run")
  events = f"{model_dir}.events.jsonl"
  process = start(
    trainer_command(
      *FLAGS[:-1],
      "--train_steps=100000",
      "--stall_timeout_secs=10",
      f"--model_dir={model_dir}",
    ),
    events=events,
  )
  try:
    events_lib.wait_for_step(events, 15, process=process)
    process.send_signal(signal.SIGSTOP)
    # Stopped past the limit and the old backstop's 10 s: the time passing
    # is what is tested, no event can stand in for it.
    time.sleep(10 + 10 + 3)
    process.send_signal(signal.SIGCONT)
    code, output = finish(process, timeout=120)
  finally:
    if process.poll() is None:
      process.kill()
  assert code == STALL, output[-3000:]
  assert re.search(
    r"stall: worker 0 made no progress for \d+ s in "
    r"(\w+|bookkeeping after \w+) at step \d+"
    # Where the main thread was stopped, when the watchdog's thread woke
    # first: e.g. ", waiting in tensorflow, called from ctl/train/loop.py:…".
    r"(, waiting in .+)? "
    r"\(limit 10 s, --stall_timeout_secs\); stacks of all threads follow; "
    "exiting with 75.",
    output,
  ), output[-3000:]
  assert "Timeout (" not in output
