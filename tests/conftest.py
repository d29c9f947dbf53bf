"""Shared test fixtures, and the helpers tests import from here.

The helpers live where benchmarks can import them too: the trainer's command
line and environment in `trainer/testing.py`, the Cloud Storage emulator and
readers of a run's files in `ctl/testing/`. Tests import them from this module
(`from tests.conftest import run_trainer, ...`) or from their homes.
"""

import pytest

from ctl.cluster import free_ports
from ctl.testing import gcs_emulator as gcs_emulator_lib
from ctl.testing.run_files import read_scalars
from ctl.testing.run_files import read_summary
from trainer.testing import FAST_FLAGS
from trainer.testing import REPO
from trainer.testing import run_trainer
from trainer.testing import trainer_command
from trainer.testing import trainer_env

# What tests import from here (the fixtures below come by name).
__all__ = [
  "FAST_FLAGS",
  "REPO",
  "free_ports",
  "read_scalars",
  "read_summary",
  "run_trainer",
  "trainer_command",
  "trainer_env",
]


@pytest.fixture
def model_dir(tmp_path):
  return str(tmp_path / "run")


@pytest.fixture
def gcs_emulator(tmp_path):
  """A running `GcsEmulator` with bucket `GcsEmulator.BUCKET`, stopped after.

  `STORAGE_EMULATOR_HOST` points at it for the test and any process it starts.
  """
  with gcs_emulator_lib.serve(
    data_dir=str(tmp_path / "gcs-emulator"),
    bucket=gcs_emulator_lib.GcsEmulator.BUCKET,
  ) as emulator:
    yield emulator
