"""trainer.flags: each option is declared once, and the flags follow it.

Flag defaults come from the dataclasses that declare the options
(`ctl.RunOptions`, `ctl.resilience.watchdog.Limits`); choice lists must name exactly what
the registries hold, so adding a dataset, model, strategy or storage route
without its flag (or the other way round) fails here. Every RunOptions field
takes the flag of its name or is set in `trainer.checks.options_set_otherwise`,
so a new option cannot be forgotten.
"""

import dataclasses
import types

from absl import flags
import pytest

from ctl.distributed import environment
from ctl.distributed import strategies
from ctl.io import storage
from ctl.resilience import watchdog
from ctl.train import options
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
