"""trainer.flags: each option is declared once, and the flags follow it.

Flag defaults come from the dataclasses that declare the options
(`ctl.RunOptions`, `ctl.resilience.watchdog.Limits`); choice lists must name exactly what
the registries hold, so adding a dataset, model, strategy or storage route
without its flag (or the other way round) fails here. Every RunOptions field
takes the flag of its name or is set in `trainer.checks.options_set_otherwise`,
so a new option cannot be forgotten.
"""

import dataclasses
import gc
import types

from absl import flags
import keras
import pytest
import tensorflow as tf

import ctl
from ctl.distributed import environment
from ctl.distributed import strategies
from ctl.io import storage
from ctl.resilience import watchdog
from ctl.train import controller
from ctl.train import options
from tests import tasks
from tests.test_step import _refused
from trainer import checks
from trainer import data
from trainer import flags as trainer_flags  # noqa: F401  (defines the flags)
from trainer import job
from trainer import model

# The configuration the flag defaults give, and its options on one machine
# (no TF_CONFIG, no supervisor).
_CONFIG = types.SimpleNamespace(
  **{name: flags.FLAGS[name].default for name in flags.FLAGS}
)
_ON_ONE_MACHINE = environment.resolve(model_dir="runs/r", environ={})
_SET_OTHERWISE = checks.options_set_otherwise(
  _CONFIG, _ON_ONE_MACHINE, train_steps=0, global_batch=0
)
_DEFAULT_OPTIONS = checks.run_options(_CONFIG, _ON_ONE_MACHINE, train_steps=0)


def _flag(name):
  return flags.FLAGS[name]


@pytest.mark.parametrize(
  "field", dataclasses.fields(options.RunOptions), ids=lambda f: f.name
)
def test_every_run_option_is_set_from_its_flag_or_otherwise(field):
  # Else a new option would silently keep its default in every trainer run.
  assert field.name in flags.FLAGS or field.name in _SET_OTHERWISE


@pytest.mark.parametrize(
  "field",
  [
    f
    for f in dataclasses.fields(options.RunOptions)
    if f.name in flags.FLAGS and f.default is not dataclasses.MISSING
  ],
  ids=lambda f: f.name,
)
def test_the_flag_defaults_give_the_declared_defaults(field):
  assert getattr(_DEFAULT_OPTIONS, field.name) == field.default


@pytest.mark.parametrize("name", ["stall_timeout_secs", "startup_timeout_secs"])
def test_watchdog_flags_default_to_the_watchdog_limits(name):
  assert _flag(name).default == options.default(watchdog.Limits, name)


@pytest.mark.parametrize(
  "name,registry",
  [
    ("storage", storage.ROUTES),
    ("dataset", data.DATASETS),
    ("model", model.MODELS),
    ("strategy", strategies.STRATEGY_NAMES),
    ("collective", strategies.COLLECTIVE_NAMES),
    ("mixed_precision", tuple(job._POLICIES)),  # pylint: disable=protected-access
  ],
)
def test_choice_lists_are_the_registries(name, registry):
  assert tuple(_flag(name).parser.enum_values) == tuple(registry)


def test_default_of_an_unknown_or_required_field_is_an_error():
  with pytest.raises(ValueError, match="no field 'nope'"):
    options.default(options.RunOptions, "nope")
  with pytest.raises(ValueError, match="has no default"):
    options.default(options.RunOptions, "dirs")


# The task's step (ctl.train.step), checked when its first loop is traced.


def _regression_output(model, batch, training, **fields):
  """`tests.tasks.regression`'s step as a StepOutput; `fields` replace it."""
  x, y = batch
  y_pred = model(x, training=training)
  output = ctl.StepOutput(tf.square(y - y_pred), y_true=y, y_pred=y_pred)
  return output._replace(**fields)


def _applied(context, batch, **fields):
  """`_regression_output` as a whole update, its gradients applied."""
  with tf.GradientTape() as tape:
    output = _regression_output(context.model, batch, True, **fields)
    loss = context.average_loss(output.per_example_loss)
  variables = context.model.trainable_variables
  gradients = tape.gradient(loss, variables)
  context.optimizer.apply_gradients(zip(gradients, variables))
  return output


def _with_aux(output):
  """`output` with a value named "aux", which no regression metric reads."""
  return output._replace(values={"aux": tf.abs(output.y_true - output.y_pred)})


@pytest.mark.parametrize("where", ["compute_loss", "replica_step"])
def test_a_value_that_no_metric_reads_is_refused_before_step_0(tmp_path, where):
  # It would be computed at every step for nothing: a misspelt metric name.
  task = dict(
    compute_loss=tasks.regression(
      loss_fn=None,
      compute_loss=lambda *args: _with_aux(_regression_output(*args)),
    ),
    replica_step=tasks.regression(
      replica_step=lambda *args: _with_aux(_applied(*args))
    ),
  )[where]
  _refused(tmp_path, task, rf"Task.{where}.* \['aux'\].*\['mae'\]")


@pytest.mark.parametrize("where", ["loss_fn", "compute_loss"])
def test_a_loss_that_reaches_no_trainable_variable_is_refused(tmp_path, where):
  # Keras's "No gradients provided for any variable", said of the task.
  steps = dict(
    loss_fn=lambda y, y_pred: tf.square(y),
    compute_loss=lambda model, batch, training: _regression_output(
      model, batch, training, per_example_loss=tf.square(batch[1])
    ),
  )
  task = tasks.regression(**{"loss_fn": None, where: steps[where]})
  _refused(
    tmp_path, task, r"^The task's per-example loss .*reaches no trainable"
  )


def test_a_loss_that_reaches_some_trainable_variables_trains(tmp_path):
  # An unused head (or a frozen branch) is the task's choice: Keras warns
  # once that those variables get no gradient, and the others train.
  def two_heads():
    x = keras.Input((tasks.FEATURES,))
    head = lambda: keras.layers.Reshape(())(keras.layers.Dense(1)(x))
    return keras.Model(x, [head(), head()])

  task = tasks.regression(
    build_model=two_heads,
    loss_fn=lambda y, y_pred: tf.square(y - y_pred[0]),
    build_metrics=None,
  )
  with pytest.warns(UserWarning, match="Gradients do not exist"):
    result = controller.run(
      task=task,
      options=tasks.run_options(tmp_path, train_steps=5, eval_every_steps=0),
      strategy=tf.distribute.get_strategy(),
    )
  assert result["final_step"] == 5


@pytest.mark.parametrize("enabled", [True, False])
def test_the_imports_run_with_the_collector_paused_then_frozen(enabled):
  from trainer import task  # pylint: disable=g-import-not-at-top

  (gc.enable if enabled else gc.disable)()
  try:
    with task._collector_paused():  # pylint: disable=protected-access
      assert not gc.isenabled()
      made = [[] for _ in range(1000)]
    assert gc.isenabled() == enabled  # As it was: a collector off stays off.
    assert gc.get_freeze_count() >= len(made)
  finally:
    gc.unfreeze()
    gc.enable()
