"""A job reading a TFDS ArrayRecord dataset by index resumes exactly.

Real trainer processes and a real SIGKILL, on a small dataset prepared offline
in ArrayRecord format: killed mid-epoch and re-run, the job ends with the
weights of a run never interrupted (`--deterministic`, a model with Dropout).
"""

import pytest

from benchmarks.workloads import tfds_jpegs
from trainer.testing import RESUME_FLAGS
from trainer.testing import kill_at_steps_then_finish
from trainer.testing import train_to_summary

# Every test here starts a process: the slow tier (tests/conftest.py).
pytestmark = pytest.mark.processes

STEPS = 30
# 100 examples, a global batch of 16: 6 steps per epoch, 4 records dropped
# (different ones each epoch); the checkpoint at step 10 is mid-epoch.
FLAGS = (
  "--dataset=cassava",
  "--model=small_cnn",
  "--dropout=0.1",
  "--image_size=16",
  "--per_replica_batch_size=16",
  *RESUME_FLAGS,
  f"--train_steps={STEPS}",
  "--learning_rate=0.003",
)


@pytest.fixture(scope="module")
def flags(tmp_path_factory):
  data_dir = tfds_jpegs.build(
    str(tmp_path_factory.mktemp("tfds")),
    file_format="array_record",
    num_train=100,
    num_eval=10,
    image_size=24,
  )
  return (*FLAGS, f"--data_dir={data_dir}")


def test_sigkill_mid_epoch_then_resume_is_bitwise_identical(flags, tmp_path):
  reference = train_to_summary(*flags, model_dir=str(tmp_path / "reference"))

  # Killed past the checkpoint at 10 (epoch 1, step 4).
  summary = kill_at_steps_then_finish(
    flags, model_dir=str(tmp_path / "run"), steps=(15,)
  )
  assert summary["final_step"] == STEPS
  assert summary["restores"] >= 1
  assert summary["weights_fingerprint"] == reference["weights_fingerprint"]
