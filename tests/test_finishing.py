"""Tests for ctl.checkpoint.finishing: the export and the summary at the end of a run."""

import json
import os

import keras

from ctl.checkpoint import export
from ctl.checkpoint import finishing
from ctl.checkpoint import serving as serving_lib
from ctl.io import outputs as outputs_lib
from ctl.telemetry import progress as progress_lib


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


def test_exports_again_unless_the_committed_model_holds_the_step(tmp_path):
  outputs, marks = _outputs(tmp_path), []
  progress = progress_lib.Progress(
    current_step=lambda: 0, listeners=(marks.append,)
  )
  # (step, trained): none there yet; the same step; trained; a step the
  # committed model does not hold (an export killed before it committed).
  for step, trained in ((5, False), (5, False), (5, True), (9, False)):
    finishing.export(
      model=_model(),
      serving=serving_lib.image_serving((4, 4, 1)),
      location=outputs.export,
      step=step,
      trained=trained,
      progress=progress,
    )
  assert os.path.exists(tmp_path / "saved_model" / "saved_model.pb")
  assert export.exported_step(outputs.export) == 9
  # All but the second, whose committed model already held step 5.
  assert [m.phase for m in marks if m.started] == ["export"] * 3


def test_the_summary_is_written_by_the_chief_only(tmp_path):
  finishing.write_summary(_outputs(tmp_path).model, {"final_step": 3})
  with open(tmp_path / finishing.SUMMARY_FILE) as f:
    assert json.load(f) == {"final_step": 3}
  finishing.write_summary(None, {"final_step": 4})  # Another worker.
  with open(tmp_path / finishing.SUMMARY_FILE) as f:
    assert json.load(f) == {"final_step": 3}
