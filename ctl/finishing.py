"""The finishing steps of a run after its last train loop: export, summary.

The controller evaluates and saves at the final step, then calls `export`
and `write_summary` here (the chief's outputs; on other workers the locations
are None and the export goes to a throwaway directory, as every worker must
take part). This is the one place a change to how a run ends belongs.
"""

import json
import os

import tensorflow as tf

from ctl import export as export_lib
from ctl import progress as progress_lib

SUMMARY_FILE = "train_summary.json"


def export(
  *,
  model: tf.keras.Model,
  image_shape,
  location,
  trained: bool,
  progress: progress_lib.Progress,
) -> None:
  """Exports the SavedModel when this run trained or there is none yet.

  Args:
    model: the trained model.
    image_shape: the served input's (height, width, channels).
    location: the chief's export location (ctl.outputs), or None.
    trained: whether this run trained any step.
    progress: marks the export phase.
  """
  if not trained and _exists(location):
    return
  with progress.phase(progress_lib.EXPORT):
    export_lib.export_saved_model(
      model=model,
      image_shape=image_shape,
      export_dir=location and location.local_path,
    )
    if location:
      location.publish()


def write_summary(location, summary: dict) -> None:
  """Writes `summary` to `<model dir>/train_summary.json` (chief: `location`)."""
  if not location:
    return
  model_dir = location.local_path
  tf.io.gfile.makedirs(model_dir)
  with tf.io.gfile.GFile(os.path.join(model_dir, SUMMARY_FILE), "w") as f:
    json.dump(summary, f, indent=2)


def _exists(location) -> bool:
  """Whether a (chief's) export location already holds a SavedModel."""
  return bool(location) and tf.io.gfile.exists(
    os.path.join(location.local_path, "saved_model.pb")
  )
