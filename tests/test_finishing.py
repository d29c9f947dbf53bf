"""Tests for ctl.finishing: the export and the summary at the end of a run."""

import json
import os

import keras

from ctl import finishing
from ctl import outputs as outputs_lib
from ctl import progress as progress_lib


def _outputs(path):
  return outputs_lib.open_outputs(
    outputs_lib.OutputDirs(
      model_dir=str(path),
      checkpoint_dir=str(path / "checkpoints"),
      tensorboard_dir=str(path / "tensorboard"),
      export_dir=str(path / "saved_model"),
    ),
    is_chief=True,
  )


def _model():
  return keras.Sequential(
    [keras.Input((4, 4, 1)), keras.layers.Flatten(), keras.layers.Dense(2)]
  )


def test_exports_once_then_again_only_after_training(tmp_path):
  outputs, marks = _outputs(tmp_path), []
  progress = progress_lib.Progress(
    current_step=lambda: 0, listeners=(marks.append,)
  )
  for trained in (False, False, True):
    finishing.export(
      model=_model(),
      image_shape=(4, 4, 1),
      location=outputs.export,
      trained=trained,
      progress=progress,
    )
  assert os.path.exists(tmp_path / "saved_model" / "saved_model.pb")
  # The first (none there yet) and the third (trained); not the second.
  assert [m.phase for m in marks if m.started] == ["export", "export"]


def test_the_summary_is_written_by_the_chief_only(tmp_path):
  finishing.write_summary(_outputs(tmp_path).model, {"final_step": 3})
  with open(tmp_path / finishing.SUMMARY_FILE) as f:
    assert json.load(f) == {"final_step": 3}
  finishing.write_summary(None, {"final_step": 4})  # Another worker.
  with open(tmp_path / finishing.SUMMARY_FILE) as f:
    assert json.load(f) == {"final_step": 3}
