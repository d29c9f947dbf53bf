"""trainer.flags: each option is declared once, and the flags follow it.

Flag defaults come from the dataclasses that declare the options
(`ctl.RunOptions`, `ctl.resilience.watchdog.Limits`); choice lists must name exactly what
the registries hold, so adding a dataset, model, strategy or storage route
without its flag (or the other way round) fails here.
"""

import dataclasses

from absl import flags
import pytest

from ctl.distributed import strategies
from ctl.io import storage
from ctl.resilience import watchdog
from ctl.train import options
from trainer import data
from trainer import flags as trainer_flags  # noqa: F401  (defines the flags)
from trainer import job
from trainer import model

# RunOptions fields the trainer derives rather than takes from a flag.
_DERIVED = {
  "dirs",
  "train_steps",
  "is_chief",
  "restarts",
  "profile_steps",
  "hparams",
  "evaluator_writes_validation",
  "job_id",
}


def _flag(name):
  return flags.FLAGS[name]


@pytest.mark.parametrize(
  "field",
  [f for f in dataclasses.fields(options.RunOptions) if f.name not in _DERIVED],
  ids=lambda f: f.name,
)
def test_every_run_option_has_a_flag_with_its_default(field):
  flag = _flag(field.name)
  if field.name == "checkpoint_every_secs":  # A string flag: "auto" or secs.
    assert float(flag.default) == field.default
  else:
    assert flag.default == field.default


@pytest.mark.parametrize("name", ["stall_timeout_secs", "startup_timeout_secs"])
def test_watchdog_flags_default_to_the_watchdog_limits(name):
  assert _flag(name).default == options.default(watchdog.Limits, name)


def test_derived_run_options_exist():
  names = {f.name for f in dataclasses.fields(options.RunOptions)}
  assert _DERIVED <= names


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
