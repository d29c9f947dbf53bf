"""Tests for ctl.io.outputs: which flag or variable decides each directory."""

import os
import tempfile

import pytest
import tensorflow as tf

from ctl.errors import UserError
from ctl.io import outputs
from ctl.train import controller
from tests import tasks

_VERTEX = {
  "AIP_MODEL_DIR": "gs://bkt/out/model/",
  "AIP_CHECKPOINT_DIR": "gs://bkt/out/checkpoints/",
  "AIP_TENSORBOARD_LOG_DIR": "gs://bkt/out/logs/",
}


def _resolve(environ=None, **flags):
  args = dict.fromkeys(outputs.DIR_FLAGS) | flags
  return outputs.resolve_output_dirs(environ=environ or {}, **args)


# Which flag or variable decides each directory: (environment, flags, the
# directories they give, in OutputDirs' order: [model, checkpoints] +
# [TensorBoard, export], two a line).
_ALL_DIRS = [
  pytest.param(
    {},
    dict(model_dir="/tmp/run/"),
    ["/tmp/run", "/tmp/run/checkpoints"]
    + ["/tmp/run/tensorboard", "/tmp/run/saved_model"],
    id="model_dir_gives_default_subdirectories",
  ),
  pytest.param(
    _VERTEX,
    {},
    ["gs://bkt/out", "gs://bkt/out/checkpoints"]
    + ["gs://bkt/out/logs", "gs://bkt/out/model"],
    id="vertex_variables_lose_their_trailing_slashes",
  ),
  pytest.param(
    _VERTEX,
    dict(model_dir="gs://mine/run", tensorboard_dir="gs://mine/tb"),
    ["gs://mine/run", "gs://mine/run/checkpoints"]
    + ["gs://mine/tb", "gs://mine/run/saved_model"],
    id="explicit_flags_win_over_vertex_variables",
  ),
  pytest.param(
    {"CLOUD_ML_TRIAL_ID": "7"},
    dict(job_dir="gs://bkt/job", export_dir="gs://bkt/export"),
    ["gs://bkt/job/trial_7", "gs://bkt/job/trial_7/checkpoints"]
    + ["gs://bkt/job/trial_7/tensorboard", "gs://bkt/export/trial_7"],
    id="trial_id_separates_directories_from_flags",
  ),
]


@pytest.mark.parametrize("environ, flags, expected", _ALL_DIRS)
def test_each_directory_comes_from_its_flag_or_variable(
  environ, flags, expected
):
  assert _resolve(environ, **flags) == outputs.OutputDirs(*expected)


def test_vertex_variable_missing_falls_back_to_a_subdirectory():
  environ = {"AIP_MODEL_DIR": "gs://bkt/out/model/"}
  assert _resolve(environ).checkpoint_dir == "gs://bkt/out/checkpoints"


def test_job_dir_is_the_model_dir():
  dirs = _resolve(job_dir="gs://bkt/job/")
  assert dirs.model_dir == "gs://bkt/job"
  assert dirs.export_dir == "gs://bkt/job/saved_model"


def test_a_dir_flag_alone_wins_over_its_vertex_variable():
  dirs = _resolve(_VERTEX, checkpoint_dir="gs://mine/ckpt")
  assert dirs.checkpoint_dir == "gs://mine/ckpt"
  assert dirs.export_dir == "gs://bkt/out/model"


def test_trial_id_leaves_vertex_directories_alone():
  dirs = _resolve({**_VERTEX, "CLOUD_ML_TRIAL_ID": "7"})
  assert dirs.checkpoint_dir == "gs://bkt/out/checkpoints"
  assert dirs.model_dir == "gs://bkt/out"


def test_no_model_dir_is_a_user_error():
  with pytest.raises(UserError, match="model_dir"):
    _resolve({"AIP_CHECKPOINT_DIR": "gs://bkt/c/"}, checkpoint_dir="")


def test_only_the_chief_opens_outputs(tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  fuse_root = tmp_path / "gcs"
  (fuse_root / "bkt").mkdir(parents=True)
  dirs = _resolve(model_dir="gs://bkt/run")
  chief = outputs.open_outputs(dirs, is_chief=True, fuse_root=str(fuse_root))
  worker = outputs.open_outputs(dirs, is_chief=False, fuse_root=str(fuse_root))
  assert chief.tensorboard.url == "gs://bkt/run/tensorboard"
  assert (worker.model, worker.tensorboard, worker.export) == (None,) * 3
  # Each worker reads checkpoints through a staging directory of its own.
  assert worker.checkpoints.local_path != chief.checkpoints.local_path
  worker_staging = worker.checkpoints.local_path
  assert os.path.isdir(worker_staging)
  worker.close()
  chief.close()
  assert not os.path.exists(worker_staging)  # Read-only staging is private.


def test_a_summary_path_that_is_a_directory_is_refused_by_the_check(
  tmp_path,
):
  """The run summary is written only at the end: a directory in its place
  was found after all the training (a traceback, exit 1)."""
  dirs = _resolve(model_dir=str(tmp_path / "run"))
  summary = tmp_path / "run" / "train_summary.json"
  summary.mkdir(parents=True)
  with pytest.raises(UserError) as raised:
    outputs.check_writable(dirs)
  message = str(raised.value)
  assert str(summary) in message and "\n" not in message, message


def test_a_run_whose_summary_cannot_be_written_stops_before_step_1(tmp_path):
  (tmp_path / "train_summary.json").mkdir()
  marks = []
  with pytest.raises(UserError, match="train_summary.json"):
    controller.run(
      task=tasks.regression(),
      options=tasks.run_options(tmp_path),
      strategy=tf.distribute.get_strategy(),
      progress_listeners=(marks.append,),
    )
  assert not [m for m in marks if m.phase == "first_loop"]
  assert tasks.written(tmp_path) == []
