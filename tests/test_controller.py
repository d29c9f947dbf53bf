"""ctl.controller.run: checks its options before it builds or writes anything.

What `run` does once it starts (restore, train, evaluate, checkpoint, roll
back, stop, export) is tested end to end through the command line in
test_trainer.py, test_fault_tolerance.py and test_multi_worker.py.
"""

import os

import pytest

from ctl import controller
from ctl import options
from ctl.errors import UserError
from tests.test_options import make_options


def test_run_rejects_bad_options_before_touching_anything(tmp_path):
  def fail(*args):
    raise AssertionError(f"called with {args}")

  task = options.Task(build_model=fail, build_optimizer=fail,
                      train_dataset_fn=fail, eval_dataset_fn=fail,
                      global_batch_size=8, image_shape=(8, 8, 3))
  with pytest.raises(UserError, match="checkpoint_every_steps"):
    controller.run(task=task, options=make_options(tmp_path,
                                               checkpoint_every_steps=15),
                   strategy=None)
  assert os.listdir(tmp_path) == []
