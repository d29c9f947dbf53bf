"""ctl.train.options: every bad option fails early with one sentence."""

import argparse
import dataclasses

import pytest

import ctl
from ctl.checkpoint import serving as serving_lib
from ctl.errors import UserError
from ctl.io.outputs import OutputDirs
from ctl.train import options


def make_options(tmp_path, **overrides):
  fields = dict(
    dirs=OutputDirs(
      model_dir=str(tmp_path / "run"),
      checkpoint_dir=str(tmp_path / "run" / "checkpoints"),
      tensorboard_dir=str(tmp_path / "run" / "tensorboard"),
      export_dir=str(tmp_path / "run" / "saved_model"),
    ),
    train_steps=100,
    steps_per_loop=10,
    log_every_steps=10,
    eval_every_steps=20,
    checkpoint_every_steps=50,
  )
  fields.update(overrides)
  return options.RunOptions(**fields)


def test_good_options_pass(tmp_path):
  make_options(tmp_path).validate()
  make_options(
    tmp_path,
    eval_every_steps=0,
    checkpoint_every_steps=0,
    checkpoint_every_secs=0,
    train_steps=0,
    async_checkpoint=True,
    keep_checkpoints=2,
    max_nan_recoveries=0,
  ).validate()


# (bad values, the same values made good, the start of the message)
_RULES = [
  (
    dict(train_steps=-1),
    dict(train_steps=0),
    "train_steps must be >= 0, got -1.",
  ),
  (
    dict(steps_per_loop=0),
    dict(steps_per_loop=1),
    "steps_per_loop must be >= 1, got 0.",
  ),
  (
    dict(checkpoint_every_steps=25),
    dict(checkpoint_every_steps=30),
    "checkpoint_every_steps must be a multiple of steps_per_loop (10), got 25.",
  ),
  (
    dict(checkpoint_every_steps=25),
    dict(steps_per_loop=5),
    "checkpoint_every_steps must be a multiple of steps_per_loop (10), got 25.",
  ),
  (
    dict(checkpoint_every_steps=-10),
    dict(checkpoint_every_steps=0),
    "checkpoint_every_steps must be a multiple of steps_per_loop (10), "
    "got -10.",
  ),
  (
    dict(log_every_steps=15),
    dict(log_every_steps=30),
    "log_every_steps must be a multiple of steps_per_loop (10), got 15.",
  ),
  (
    dict(eval_every_steps=5),
    dict(eval_every_steps=0),
    "eval_every_steps must be a multiple of steps_per_loop (10), got 5.",
  ),
  (
    dict(log_every_steps=0),
    dict(log_every_steps=10),
    "log_every_steps must be > 0.",
  ),
  (
    dict(keep_checkpoints=0),
    dict(keep_checkpoints=1),
    "keep_checkpoints must be >= 1, got 0.",
  ),
  (
    dict(keep_checkpoints=1, async_checkpoint=True),
    dict(keep_checkpoints=2, async_checkpoint=True),
    "keep_checkpoints must be >= 2 with async_checkpoint",
  ),
  (
    dict(checkpoint_every_secs=-1.0),
    dict(checkpoint_every_secs=0.0),
    "checkpoint_every_secs must be >= 0.",
  ),
  (
    dict(checkpoint_every_secs="often"),
    dict(checkpoint_every_secs="auto"),
    "checkpoint_every_secs must be auto or a number of seconds, got 'often'.",
  ),
  (
    dict(expected_mtbf_secs=0.0),
    dict(expected_mtbf_secs=60.0),
    "expected_mtbf_secs must be > 0.",
  ),
  (
    dict(max_nan_recoveries=-1),
    dict(max_nan_recoveries=0),
    "max_nan_recoveries must be >= 0.",
  ),
  (
    dict(profile_steps=(20, 10)),
    dict(profile_steps=(10, 20)),
    "profile_steps must be START,END with 1 <= START <= END, got 20,10.",
  ),
  (
    dict(profile_steps=(0, 5)),
    dict(profile_steps=(1, 5)),
    "profile_steps must be START,END with 1 <= START <= END, got 0,5.",
  ),
  # Values of the wrong kind, as `ctl.run` users can pass them (issue 36):
  # nan turned time-based saves off, inf killed the lease thread, "40" was a
  # TypeError inside the controller.
  (
    dict(checkpoint_every_secs=float("nan")),
    dict(checkpoint_every_secs=60.0),
    "checkpoint_every_secs must be a finite number, got nan.",
  ),
  (
    dict(lease_stale_secs=float("inf")),
    dict(lease_stale_secs=120.0),
    "lease_stale_secs must be a finite number, got inf.",
  ),
  (
    dict(train_steps="40"),
    dict(train_steps=40),
    "train_steps must be a whole number, got '40'.",
  ),
  (
    dict(xla="yes"),
    dict(xla=True),
    "xla must be True or False, got 'yes'.",
  ),
]


def test_a_model_dir_that_is_a_file_is_one_sentence(tmp_path):
  (tmp_path / "run").write_text("not a directory")
  with pytest.raises(UserError, match=r"model_dir .* is a file, not a dir"):
    make_options(tmp_path).validate()


@pytest.mark.parametrize("bad,good,expected", _RULES)
def test_each_rule_names_the_option(tmp_path, bad, good, expected):
  with pytest.raises(UserError) as error:
    make_options(tmp_path, **bad).validate()
  message = str(error.value)
  assert message.startswith(expected)
  assert message.endswith(".") and "\n" not in message
  make_options(tmp_path, **{**bad, **good}).validate()


def test_options_are_frozen(tmp_path):
  with pytest.raises(dataclasses.FrozenInstanceError):
    make_options(tmp_path).train_steps = 5


def test_from_flags_takes_each_field_from_the_flag_of_its_name(tmp_path):
  dirs = make_options(tmp_path).dirs
  flags = argparse.Namespace(seed=7, xla=True, train_steps=1, unrelated="x")
  built = options.from_flags(options.RunOptions, flags, dirs=dirs, seed=8)
  assert (built.xla, built.train_steps) == (True, 1)  # From the flags.
  assert built.seed == 8  # A value given wins over the flag of its name.
  assert built.keep_checkpoints == 3  # Neither: the declared default.


# The task: each field checked in one sentence; the ready-made image task.


def _task(**fields) -> options.Task:
  return options.Task(
    **{
      "build_model": lambda: None,
      "build_optimizer": lambda: None,
      "train_dataset_fn": lambda *args: None,
      "eval_dataset_fn": None,
      "global_batch_size": 32,
      **fields,
    }
  )


def test_a_task_of_plain_callables_is_valid():
  _task().validate()
  _task(serving=None, loss_fn=lambda y, p: y).validate()


@pytest.mark.parametrize(
  ("fields", "sentence"),
  [
    ({"build_model": "resnet"}, "Task.build_model must be callable."),
    ({"eval_dataset_fn": 3}, "Task.eval_dataset_fn must be callable or None."),
    ({"global_batch_size": 0}, "Task.global_batch_size must be a whole number"),
    ({"global_batch_size": True}, "Task.global_batch_size must be a whole"),
    (
      {"loss_fn": abs, "compute_loss": abs},
      "Task.loss_fn is for the default forward pass",
    ),
    ({"serving": "images"}, 'Task.serving must be "model", a ctl.Serving'),
  ],
)
def test_a_bad_field_is_one_sentence_naming_it(fields, sentence):
  with pytest.raises(ctl.UserError) as raised:
    _task(**fields).validate()
  message = str(raised.value)
  assert message.startswith(sentence) and len(message.splitlines()) == 1


def test_image_classification_fills_metrics_and_serving_but_keeps_yours():
  task = options.image_classification(image_shape=(8, 8, 3), **_fields())
  assert set(task.build_metrics()) == {"accuracy"}
  assert task.serving.input_signature.shape.as_list() == [None, 8, 8, 3]
  own = options.image_classification(
    image_shape=(8, 8, 3), serving=None, **_fields()
  )
  assert own.serving is None


def _fields() -> dict:
  task = _task()
  return {
    name: getattr(task, name)
    for name in (
      "build_model",
      "build_optimizer",
      "train_dataset_fn",
      "eval_dataset_fn",
      "global_batch_size",
    )
  }


def test_the_serving_default_is_the_models_own_inputs():
  assert _task().serving == serving_lib.FROM_MODEL == "model"
