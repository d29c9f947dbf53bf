"""ctl.train.actions: what an action decides or changes is in the checkpoint
that follows it, so a run stopped and resumed decides as the uninterrupted
run does."""

import dataclasses
import json
import os
import time

import keras
import pytest
import tensorflow as tf

import ctl
from ctl.telemetry import goodput
from ctl.telemetry import ledger_reader
from ctl.train import controller
from tests import tasks
from tests.conftest import launch_two_workers


class _Killed(BaseException):
  """Stands for the process dying: the run stops where it is, unsaved (a
  BaseException: progress listeners' errors are only logged)."""


def _killed_after(step: int):
  """A progress listener that ends the run as the loop after `step` starts:
  after the checkpoint of `step` and everything before it."""

  def listener(mark):
    if mark.phase == "train_loop" and mark.started and mark.step == step:
      raise _Killed(step)

  return (listener,)


def _run(model_dir, actions, *, listeners=(), **options) -> dict:
  keras.utils.set_random_seed(0)
  return controller.run(
    task=tasks.regression(),
    options=tasks.run_options(model_dir, **options),
    strategy=tf.distribute.get_strategy(),
    loop_actions=actions,
    progress_listeners=listeners,
  )


def _killed_then_resumed(model_dir, make_actions, **options) -> dict:
  with pytest.raises(_Killed):
    _run(model_dir, make_actions(), listeners=_killed_after(10), **options)
  return _run(model_dir, make_actions(), **options)


def test_early_stopping_resumed_stops_where_the_uninterrupted_run_stops(
  tmp_path,
):
  # An improvement must beat the best by 10: after the first evaluation the
  # counter only advances (10: 1, then 15: 2 = patience).
  make = lambda: [ctl.EarlyStopping(metric="mae", patience=2, min_delta=10.0)]
  options = dict(train_steps=40, eval_every_steps=5)
  uninterrupted = _run(tmp_path / "uninterrupted", make(), **options)
  resumed = _killed_then_resumed(tmp_path / "resumed", make, **options)
  assert uninterrupted["stopped_early"]["step"] == 15
  assert resumed["stopped_early"] == uninterrupted["stopped_early"]
  assert resumed["restores"] == 1
  assert resumed["weights_fingerprint"] == uninterrupted["weights_fingerprint"]


class _HalveRateAt:
  """Halves the learning rate at one step (as ReduceLROnPlateau would)."""

  def __init__(self, step: int):
    self._step = step
    self.optimizer = None

  def __call__(self, step, result):
    del result
    if step == self._step:
      rate = self.optimizer.learning_rate
      rate.assign(rate * 0.5)


def _run_with_cut(model_dir, listeners=()) -> tuple[dict, _HalveRateAt]:
  """A run of 30 steps whose action halves the learning rate at step 10."""
  cut, task = _HalveRateAt(10), tasks.regression()

  def build_optimizer():
    cut.optimizer = task.build_optimizer()
    return cut.optimizer

  keras.utils.set_random_seed(0)
  summary = controller.run(
    task=dataclasses.replace(task, build_optimizer=build_optimizer),
    options=tasks.run_options(model_dir, train_steps=30),
    strategy=tf.distribute.get_strategy(),
    loop_actions=[cut],
    progress_listeners=listeners,
  )
  return summary, cut


def test_a_learning_rate_cut_at_a_checkpoint_step_survives_a_resume(tmp_path):
  # The checkpoint of step 10 is saved after the actions of step 10: the
  # resumed run trains from it with the halved rate, as the uninterrupted.
  uninterrupted, _ = _run_with_cut(tmp_path / "uninterrupted")
  with pytest.raises(_Killed):
    _run_with_cut(tmp_path / "resumed", _killed_after(10))
  resumed, cut = _run_with_cut(tmp_path / "resumed")
  assert float(cut.optimizer.learning_rate.numpy()) == pytest.approx(0.025)
  assert resumed["restores"] == 1
  assert resumed["weights_fingerprint"] == uninterrupted["weights_fingerprint"]


def _best_export(model_dir) -> tuple[int, list]:
  """(the step `ctl.KeepBest`'s export holds, its predictions on a fixed
  batch), checked against the checkpoint kept inside it: the same step, and
  a model restored from it predicts the same."""
  path = model_dir / "best_saved_model"
  marker = json.loads((path / "ctl_export.json").read_text())
  serve = tf.saved_model.load(str(path)).signatures["serving_default"]
  batch = tf.reshape(tf.range(2 * tasks.FEATURES, dtype=tf.float32), [2, -1])
  predictions = serve(x=batch)["outputs"].numpy().tolist()
  model = tasks.regression().build_model()
  step = tf.Variable(0, dtype=tf.int64)
  checkpoint = tf.train.Checkpoint(model=model, global_step=step)
  checkpoint.read(str(path / "checkpoint" / "ckpt")).expect_partial()
  assert int(step.numpy()) == marker["step"]
  assert model(batch).numpy().tolist() == pytest.approx(predictions)
  return marker["step"], predictions


def test_keep_best_resumed_keeps_the_export_and_checkpoint_the_uninterrupted_run_keeps(
  tmp_path,
):
  make = lambda: [ctl.KeepBest(metric="mae")]
  options = dict(train_steps=30, eval_every_steps=5)
  _run(tmp_path / "uninterrupted", make(), **options)
  _killed_then_resumed(tmp_path / "resumed", make, **options)
  kept = _best_export(tmp_path / "uninterrupted")
  assert kept[0] > 0
  assert _best_export(tmp_path / "resumed") == kept


def test_loop_actions_are_a_phase_of_their_own_not_training(tmp_path):
  # Each of the 4 loops' actions sleeps 0.3 s: the ledger puts that time in
  # loop_actions (what a stall there is named after), not in goodput.
  marks = []
  _run(
    tmp_path,
    [lambda step, result: time.sleep(0.3)],
    listeners=(marks.append,),
  )
  ends = [m for m in marks if m.phase == "loop_actions" and not m.started]
  assert [m.step for m in ends] == [5, 10, 15, 20]
  (attempt,) = ledger_reader.read(str(tmp_path / "ledger"))
  accounting = goodput.account([attempt])
  assert accounting.seconds[goodput.ACTIONS] >= 4 * 0.3


def _launch(model_dir, *, faults=None) -> dict:
  """tests/stateful_actions_run.py for 40 steps on two workers."""
  return launch_two_workers(
    "tests/stateful_actions_run.py",
    model_dir,
    "--train_steps=40",
    faults=faults,
  )


@pytest.mark.processes
def test_stateful_actions_on_two_workers_sigkilled_decide_as_uninterrupted(
  tmp_path,
):
  # Worker 1 SIGKILLs itself at the loop boundary of step 15 (the patience
  # counter at 2 of 3): the job restarts from the checkpoint of step 15 or
  # before, and both actions decide from their restored state.
  uninterrupted = _launch(tmp_path / "uninterrupted")
  killed = tmp_path / "killed"
  resumed = _launch(killed, faults="crash@15:worker=1:attempt=0")
  # EarlyStopping decides at 20 on both workers, and the run ends there, at
  # the step the same actions end one worker's run (was: 25, a loop later).
  one_worker = _run(
    tmp_path / "one_worker",
    [
      ctl.EarlyStopping(metric="mae", patience=3, min_delta=10.0),
      ctl.KeepBest(metric="mae"),
    ],
    train_steps=40,
    eval_every_steps=5,
    checkpoint_every_steps=5,
  )
  assert one_worker["stopped_early"]["step"] == 20
  assert uninterrupted["stopped_early"] == one_worker["stopped_early"]
  assert uninterrupted["final_step"] == 20
  assert resumed == uninterrupted
  assert (
    len(ledger_reader.read(str(killed / "ledger"))) == 2
  )  # Killed, resumed.
  assert _best_export(killed) == _best_export(tmp_path / "uninterrupted")


def _checkpoint_steps(model_dir) -> list[int]:
  """The steps of the checkpoints in `model_dir`/checkpoints."""
  directory = os.path.join(str(model_dir), "checkpoints")
  names = [n for n in os.listdir(directory) if n.endswith(".index")]
  return sorted(int(n[len("ckpt-") : -len(".index")]) for n in names)


@pytest.mark.processes
def test_a_stop_decided_on_the_chief_only_ends_both_workers_at_one_step(
  tmp_path,
):
  # The chief's action stops at step 10; worker 1's does not. The workers
  # agree right after their actions: both end at step 10 (was: 15, after
  # the next loop), exit 0 (the launcher's), with the checkpoint of 10.
  summary = launch_two_workers(
    "tests/chief_stop_run.py", tmp_path, "--train_steps=40"
  )
  assert summary["final_step"] == 10
  assert summary["stopped_early"] == {
    "step": 10,
    "reason": "the chief's own decision",
  }
  assert max(_checkpoint_steps(tmp_path)) == 10


def test_a_stop_from_an_evaluation_callback_ends_the_run_as_an_actions(
  tmp_path,
):
  def stop_at_10(step, metrics):
    del metrics
    if step == 10:
      raise ctl.StopTraining("enough, said the callback")

  keras.utils.set_random_seed(0)
  summary = controller.run(
    task=tasks.regression(),
    options=tasks.run_options(tmp_path, train_steps=40, eval_every_steps=5),
    strategy=tf.distribute.get_strategy(),
    eval_callbacks=[stop_at_10],
  )
  assert summary["stopped_early"] == {
    "step": 10,
    "reason": "enough, said the callback",
  }
  assert summary["final_step"] == 10
  assert _checkpoint_steps(tmp_path)[-1] == 10


def _refused_at_start(model_dir, action, task, match) -> None:
  """The run with `action` raises one sentence, UserError matching `match`,
  before its step 0 is saved: nothing a reader takes for a result."""
  keras.utils.set_random_seed(0)
  with pytest.raises(ctl.UserError, match=match) as raised:
    controller.run(
      task=task,
      options=tasks.run_options(model_dir),
      strategy=tf.distribute.get_strategy(),
      loop_actions=[action],
    )
  assert "\n" not in str(raised.value)
  assert tasks.written(model_dir) == []


_MISSPELT = r"metric='mea'.* loss, mae\.$"
_NO_EVALUATION = r"evaluation.*Task\.eval_dataset_fn is None"


@pytest.mark.parametrize(
  "make, task_fields, match",
  [
    (lambda: ctl.EarlyStopping(metric="mea", patience=2), {}, _MISSPELT),
    (lambda: ctl.KeepBest(metric="mea", mode="min"), {}, _MISSPELT),
    (
      lambda: ctl.EarlyStopping(metric="loss", patience=2),
      {"eval_dataset_fn": None},
      _NO_EVALUATION,
    ),
    (
      lambda: ctl.KeepBest(metric="mae", mode="min"),
      {"eval_dataset_fn": None},
      _NO_EVALUATION,
    ),
  ],
  ids=[
    "EarlyStopping-misspelt",
    "KeepBest-misspelt",
    "EarlyStopping-no-evaluation",
    "KeepBest-no-evaluation",
  ],
)
def test_an_action_on_what_the_run_never_reports_is_refused_at_start(
  tmp_path, make, task_fields, match
):
  """A misspelt metric, or an evaluation metric in a run without one,
  would be looked up in vain at every loop: the action never acted."""
  _refused_at_start(
    tmp_path, make(), tasks.regression(**task_fields), match=match
  )
