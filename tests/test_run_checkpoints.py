"""Tests for ctl.checkpoint.run_checkpoints: the restore of start-up, marked saves."""

import os

import tensorflow as tf

from ctl.checkpoint import checkpointing
from ctl.checkpoint import run_checkpoints
from ctl.checkpoint import save_policy
from ctl.telemetry import progress as progress_lib


def _checkpoints(directory, marks):
  step = tf.Variable(0, dtype=tf.int64)
  restores = tf.Variable(0, dtype=tf.int64)
  duty = run_checkpoints.RunCheckpoints(
    checkpointer=checkpointing.Checkpointer(
      checkpoint=tf.train.Checkpoint(step=step, restores=restores),
      directory=str(directory),
      is_chief=True,
      keep=3,
      async_save=False,
    ),
    policy=save_policy.SavePolicy(
      every_steps=10,
      every_secs=0,
      expected_mtbf_secs=3600.0,
      train_steps=40,
      is_chief=True,
    ),
    progress=progress_lib.Progress(
      current_step=lambda: int(step.numpy()), listeners=(marks.append,)
    ),
    global_step=step,
    restores=restores,
  )
  return duty, step, restores


def test_a_fresh_start_restores_nothing_and_saves_nothing_then_a_restart_restores(
  tmp_path,
):
  # The controller saves step 0 itself, once the first loop is traced.
  marks = []
  duty, step, _ = _checkpoints(tmp_path, marks)
  assert duty.restore_at_start(directory=str(tmp_path), train_steps=40) == (
    False,
    0,
  )
  assert marks == [] and not os.listdir(tmp_path)
  step.assign(20)
  duty.save(20)
  duty.close()
  assert os.path.exists(tmp_path / "ckpt-20.index")

  again, _, restores = _checkpoints(tmp_path, [])
  assert again.restore_at_start(directory=str(tmp_path), train_steps=40) == (
    True,
    20,
  )
  assert int(restores.numpy()) == 1 and again.policy.last_step == 20
  again.close()


def test_nothing_to_train_and_no_checkpoint_saves_nothing(tmp_path):
  marks = []
  duty, _, _ = _checkpoints(tmp_path, marks)
  assert duty.restore_at_start(directory=str(tmp_path), train_steps=0) == (
    False,
    0,
  )
  duty.close()
  assert marks == [] and not os.listdir(tmp_path)


def test_maybe_save_saves_when_the_policy_says_and_the_end_once(tmp_path):
  marks = []
  duty, step, _ = _checkpoints(tmp_path, marks)
  duty.restore_at_start(directory=str(tmp_path), train_steps=40)
  saved = []
  for at, requested in ((5, False), (10, False), (15, True), (40, False)):
    step.assign(at)
    saved.append(duty.maybe_save(at, requested=requested))
  # Every 10 steps, or when the loop agreed on a save by time; never the
  # last step, which belongs to the finishing steps (`save_final`).
  assert saved == [False, True, True, False]
  assert duty.save_final(40) and not duty.save_final(40)
  duty.close()
  assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".index")) == [
    "ckpt-10.index",
    "ckpt-15.index",
    "ckpt-40.index",
  ]
  assert duty.summary() == {}  # No "auto" interval to report.
