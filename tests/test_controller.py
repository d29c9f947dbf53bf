"""ctl.train.controller.run: checks its options before it builds or writes anything.

What `run` does once it starts (restore, train, evaluate, checkpoint, roll
back, stop, export) is tested end to end through the command line in
test_trainer.py, test_fault_tolerance.py and test_multi_worker.py.
"""

import ast
import dataclasses
import inspect
import os

import pytest

from ctl.errors import UserError
from ctl.telemetry import ledger_reader
from ctl.train import controller
from ctl.train import options
from ctl.train import parts
from tests.conftest import read_scalars
from tests.test_options import make_options


def test_run_rejects_bad_options_before_touching_anything(tmp_path):
  def fail(*args):
    raise AssertionError(f"called with {args}")

  task = options.Task(
    build_model=fail,
    build_optimizer=fail,
    train_dataset_fn=fail,
    eval_dataset_fn=fail,
    global_batch_size=8,
  )
  with pytest.raises(UserError, match="checkpoint_every_steps"):
    controller.run(
      task=task,
      options=make_options(tmp_path, checkpoint_every_steps=15),
      strategy=None,
    )
  assert os.listdir(tmp_path) == []


def test_every_option_reaches_one_record_and_no_part_reads_the_options(
  tmp_path,
):
  """`run` splits RunOptions where the run starts (controller._Plan) into
  the records the parts take: an option that no record carries would be
  ignored by every part below, so each one, set to a value of its own, must
  come out in a record."""
  base = make_options(tmp_path)
  for field in dataclasses.fields(options.RunOptions):
    mark = (
      dataclasses.replace(base.dirs, model_dir=str(tmp_path / "marked"))
      if field.name == "dirs"
      else object()
    )
    plan = controller._Plan(dataclasses.replace(base, **{field.name: mark}))
    carried = [
      getattr(record, name.name)
      for record in vars(plan).values()
      for name in dataclasses.fields(record)
    ]
    assert any(value is mark for value in carried), field.name
  # Below the split, no function takes the options (read from the source).
  for module in (controller, parts):
    tree = ast.parse(inspect.getsource(module))
    taking = {
      node.name
      for node in ast.walk(tree)
      if isinstance(node, ast.FunctionDef)
      and "options"
      in {arg.arg for arg in node.args.kwonlyargs + node.args.args}
    }
    assert taking <= {"run", "__init__"}, (module.__name__, taking)
  assert not hasattr(parts, "RunOptions")  # Not even imported there.


def _tiny_task():
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def dataset(context, start_step, seed):
    del context, start_step, seed
    images = tf.random.stateless_uniform([64, 8, 8, 3], seed=[1, 2])
    labels = tf.range(64, dtype=tf.int64) % 2
    return (
      tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(8)
    )

  return options.image_classification(
    build_model=lambda: keras.Sequential(
      [keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(2)]
    ),
    build_optimizer=lambda: keras.optimizers.SGD(0.1),
    train_dataset_fn=dataset,
    eval_dataset_fn=lambda context: dataset(context, 0, 0).take(2),
    global_batch_size=8,
    image_shape=(8, 8, 3),
  )


def _run_tiny(
  model_dir,
  task=None,
  *,
  eval_callbacks=(),
  progress_listeners=(),
  loop_actions=(),
  **options,
) -> dict:
  """`controller.run` of `task` (default: `_tiny_task()`) in loops of 2
  steps, each logged, with the default strategy; `options` override."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  return controller.run(
    task=task or _tiny_task(),
    options=make_options(
      model_dir, steps_per_loop=2, log_every_steps=2, **options
    ),
    strategy=tf.distribute.get_strategy(),
    eval_callbacks=eval_callbacks,
    progress_listeners=progress_listeners,
    loop_actions=loop_actions,
  )


def test_without_train_metrics_a_run_logs_none_and_trains_the_same(tmp_path):
  import keras  # pylint: disable=g-import-not-at-top

  summaries = []
  for train_metrics in (True, False):
    keras.utils.set_random_seed(0)
    model_dir = tmp_path / str(train_metrics)
    summaries.append(
      _run_tiny(
        model_dir,
        train_steps=4,
        eval_every_steps=0,
        checkpoint_every_steps=0,
        train_metrics=train_metrics,
      )
    )
    tags = read_scalars(str(model_dir / "run" / "tensorboard" / "train"))
    assert ("accuracy" in tags) == train_metrics
    assert [step for step, _ in tags["loss"]] == [2, 4]
  with_accuracy, without = summaries
  assert 0 <= with_accuracy["train_accuracy"] <= 1
  assert without["train_accuracy"] is None
  assert without["train_loss"] == pytest.approx(with_accuracy["train_loss"])
  assert without["weights_fingerprint"] == with_accuracy["weights_fingerprint"]


def test_an_evaluation_of_no_examples_is_no_metric(tmp_path):

  task = _tiny_task()
  empty = lambda context: task.train_dataset_fn(context, 0, 0).take(0)
  reported = []
  summary = _run_tiny(
    tmp_path,
    dataclasses.replace(task, eval_dataset_fn=empty),
    eval_callbacks=[lambda step, metrics: reported.append((step, metrics))],
    train_steps=4,
    eval_every_steps=2,
    checkpoint_every_steps=0,
  )
  assert reported == []  # Nothing for hyperparameter tuning.
  assert summary["eval_loss"] is None and summary["eval_accuracy"] is None
  board = tmp_path / "run" / "tensorboard"
  assert "loss" in read_scalars(str(board / "train"))
  assert not (board / "validation").exists()


def test_progress_listeners_see_every_phase_of_a_run_in_order(tmp_path):

  marks = []
  _run_tiny(
    tmp_path,
    progress_listeners=(marks.append,),
    train_steps=6,
    checkpoint_every_steps=4,
  )
  ends = [(m.phase, m.step) for m in marks if not m.started]
  # The step-0 save (the divergence guard's rollback target) comes once the
  # first loop is traced, inside it: a step that cannot work saves nothing.
  assert ends == [
    ("restore", 0),
    ("startup", 0),
    ("checkpoint_save", 0),
    ("first_loop", 2),
    ("train_loop", 4),
    ("checkpoint_save", 4),
    ("train_loop", 6),
    ("evaluation", 6),
    ("checkpoint_save", 6),
    ("export", 6),
    ("run", 6),
  ]  # The whole run encloses every other phase.
  assert all(m.ok for m in marks)
  assert [
    m.steps for m in marks if m.phase.endswith("loop") and not m.started
  ] == [2, 2, 2]


def test_a_loop_action_stops_the_run_cleanly_at_the_step_it_chose(tmp_path):
  import ctl  # pylint: disable=g-import-not-at-top

  seen, evaluated, marks = [], [], []

  def stop_at_4(step, result):
    seen.append((step, sorted(result.eval_metrics), result.is_chief))
    if step == 4:
      raise ctl.StopTraining("enough at 4")

  summary = _run_tiny(
    tmp_path,
    loop_actions=[stop_at_4],
    eval_callbacks=[lambda step, metrics: evaluated.append(step)],
    progress_listeners=(marks.append,),
    train_steps=10,
    eval_every_steps=4,
    checkpoint_every_steps=0,
  )
  # After the built-in duties: loop 4's evaluation is in its result.
  assert seen == [(2, [], True), (4, ["accuracy", "examples", "loss"], True)]
  assert evaluated == [4]  # The finishing steps do not evaluate step 4 again.
  assert summary["final_step"] == 4
  assert summary["stopped_early"] == {"step": 4, "reason": "enough at 4"}
  ends = [(m.phase, m.step) for m in marks if not m.started]
  assert ends[-3:] == [("checkpoint_save", 4), ("export", 4), ("run", 4)]
  assert (tmp_path / "run" / "saved_model" / "saved_model.pb").is_file()
  (attempt,) = ledger_reader.read(str(tmp_path / "run" / "ledger"))
  (stopped,) = [e for e in attempt if e["event"] == "stopped_early"]
  assert (stopped["step"], stopped["reason"]) == (4, "enough at 4")
  assert attempt[-1]["outcome"] == "done"


def test_without_loop_actions_the_summary_has_no_early_stop(tmp_path):
  summary = _run_tiny(
    tmp_path, train_steps=2, eval_every_steps=0, checkpoint_every_steps=0
  )
  assert summary["final_step"] == 2 and "stopped_early" not in summary


def test_a_finished_runs_summary_and_ctl_report_say_its_last_start_is_done(
  tmp_path, capsys
):
  # The summary is written before the run's end event: its goodput must
  # still say how this start ends, as ctl-report does once it has ended.
  from ctl import report  # pylint: disable=g-import-not-at-top
  from ctl.testing.run_files import read_summary  # pylint: disable=g-import-not-at-top

  _run_tiny(tmp_path, train_steps=4, eval_every_steps=0)
  model_dir = str(tmp_path / "run")
  (last,) = read_summary(model_dir)["goodput"]["attempts"]
  assert last["outcome"] == "done"
  report.main([model_dir, "--png="])
  table = capsys.readouterr().out.split("outcome\n")[1].split("\n\n")[0]
  rows = table.splitlines()
  assert rows[-1].split()[6] == last["outcome"]
  # And the same seconds: the ledger's end is the moment the summary
  # accounted (a later one made ctl-report say 67.1% where the summary had
  # 67.2%: test_wall_clock failed in a fresh-clone CI run).
  from ctl.telemetry import goodput  # pylint: disable=g-import-not-at-top

  summary = read_summary(model_dir)["goodput"]
  reported = goodput.account(
    ledger_reader.read(ledger_reader.ledger_dir(model_dir))
  )
  assert round(reported.total_seconds, 3) == summary["total_seconds"]
  assert round(reported.goodput_percent, 2) == summary["goodput_percent"]


def _local_saves(model_dir) -> int:

  (attempt,) = ledger_reader.read(ledger_reader.ledger_dir(str(model_dir)))
  return sum(e.get("phase") == "local_checkpoint_save" for e in attempt)


def test_a_run_without_a_job_id_keeps_no_local_tier_by_default(
  tmp_path, monkeypatch
):
  # Named after this process, the tier could never be found again after a
  # restart: its saves would cost every loop for nothing.
  from ctl.checkpoint.tiers import node_tiers  # pylint: disable=g-import-not-at-top
  from tests.conftest import absl_messages  # pylint: disable=g-import-not-at-top

  ram, disk = tmp_path / "ram", tmp_path / "disk"
  ram.mkdir()
  disk.mkdir()
  monkeypatch.setattr(node_tiers, "RAM_ROOT", str(ram))
  monkeypatch.setattr("tempfile.tempdir", str(disk))
  with absl_messages() as messages:
    _run_tiny(tmp_path, train_steps=6, eval_every_steps=0)
  assert os.listdir(ram) == [] and os.listdir(disk) == []
  assert _local_saves(tmp_path / "run") == 0
  (said,) = [m for m in messages if m.startswith("No local checkpoint tier")]
  assert "no job id" in said


def test_a_run_with_a_tier_directory_leaves_nothing_in_it(tmp_path):
  tiers = tmp_path / "tiers"
  _run_tiny(
    tmp_path, train_steps=6, eval_every_steps=0, local_checkpoints=str(tiers)
  )
  assert _local_saves(tmp_path / "run") == 2  # Steps 2 and 4.
  assert os.listdir(tiers / f"ctl-tier-{os.getuid()}") == []


def _regression_step(*, apply: bool):
  """A `Task.replica_step` of `tests.tasks.regression`'s loss that takes
  its gradients and applies them only if `apply`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  import ctl  # pylint: disable=g-import-not-at-top

  def replica_step(context, batch):
    x, y = batch
    variables = context.model.trainable_variables
    with tf.GradientTape() as tape:
      y_pred = context.model(x, training=True)
      per_example_loss = tf.square(y - y_pred)
      scaled_loss = context.optimizer.scale_loss(
        context.average_loss(per_example_loss)
      )
    gradients = tape.gradient(scaled_loss, variables)
    if apply:
      context.optimizer.apply_gradients(zip(gradients, variables))
    return ctl.StepOutput(per_example_loss, y_true=y, y_pred=y_pred)

  return replica_step


def _run_regression(model_dir, steps_per_loop=5, **fields) -> dict:
  """`controller.run` of `tests.tasks.regression(**fields)`, 60 steps in
  loops of `steps_per_loop`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from tests import tasks  # pylint: disable=g-import-not-at-top

  return controller.run(
    task=tasks.regression(**fields),
    options=tasks.run_options(
      model_dir, train_steps=60, steps_per_loop=steps_per_loop
    ),
    strategy=tf.distribute.get_strategy(),
  )


def test_a_replica_step_that_applies_no_update_is_refused_after_the_first_loop(
  tmp_path,
):
  from tests import tasks  # pylint: disable=g-import-not-at-top

  with pytest.raises(UserError, match="Task.replica_step") as raised:
    _run_regression(tmp_path, replica_step=_regression_step(apply=False))
  assert "optimizer.iterations advanced 0 over 5 steps" in str(raised.value)
  assert "\n" not in str(raised.value)
  assert "saved_model" not in tasks.written(tmp_path)
  assert "train_summary.json" not in tasks.written(tmp_path)


@pytest.mark.parametrize(
  "optimizer",
  ["loss_scale_skips", "accumulates"],
)
def test_an_update_the_optimizer_skips_or_accumulates_is_not_refused(
  tmp_path, optimizer
):
  # Keras counts neither a step a LossScaleOptimizer skipped (non-finite
  # gradients: this scale overflows float32; the first loop is its one
  # step) nor, with gradient accumulation, a step before the update (the
  # first loop's 5 of 6): the first loop counts no update, yet the step
  # applies its gradients.
  import keras  # pylint: disable=g-import-not-at-top

  build, steps_per_loop = {
    "loss_scale_skips": (
      lambda: keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.05), initial_scale=2.0**127
      ),
      1,
    ),
    "accumulates": (
      lambda: keras.optimizers.SGD(0.05, gradient_accumulation_steps=6),
      5,
    ),
  }[optimizer]
  summary = _run_regression(
    tmp_path,
    steps_per_loop,
    replica_step=_regression_step(apply=True),
    build_optimizer=build,
  )
  assert summary["final_step"] == 60
