"""The finishing steps of a run after its last train loop: export, summary.

The controller evaluates and saves at the final step, then calls `export`
and `write_summary` here (the chief's outputs; on other workers the locations
are None and the export goes to a throwaway directory, as every worker must
take part). This is the one place a change to how a run ends belongs.
"""

import json
import os

from absl import logging
import tensorflow as tf

from ctl import export as export_lib
from ctl import goodput as goodput_lib
from ctl import progress as progress_lib
from ctl import summaries

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


def nothing_to_train(*, checkpoint_dir: str, ledger) -> dict:
  """Ends a run asked for 0 steps with no checkpoint: nothing is written.

  An untrained export or checkpoint helps no one, and the ledger's record of
  this start is discarded.

  Returns:
    The summary of such a run (not written).
  """
  logging.info(
    "train_steps is 0 and %s holds no checkpoint: nothing to "
    "train, nothing written.",
    checkpoint_dir,
  )
  if ledger:
    ledger.discard()
  return {"final_step": 0}


def goodput(
  accounting: goodput_lib.Accounting,
  *,
  step: int,
  writer: summaries.ScalarWriter,
  model_dir: str,
) -> dict:
  """Reports the run's goodput (scalar and log line); its summary entry."""
  writer.write(step, {"goodput/percent": accounting.goodput_percent})
  logging.info(
    "Goodput %.1f%% of %.1f s over %d start(s) (ctl-report %s "
    "shows where the rest went).",
    accounting.goodput_percent,
    accounting.total_seconds,
    len(accounting.attempts),
    model_dir,
  )
  return accounting.summary()


def log_done(summary: dict, *, model_dir: str) -> None:
  """The run's last line: where it ended and where its summary is."""
  accuracy = summary["eval_accuracy"]
  logging.info(
    "Done at step %d: eval accuracy %s, weights fingerprint %s; summary in %s.",
    summary["final_step"],
    "n/a" if accuracy is None else f"{accuracy:.4f}",
    summary["weights_fingerprint"][:16],
    os.path.join(model_dir, SUMMARY_FILE),
  )


def _exists(location) -> bool:
  """Whether a (chief's) export location already holds a SavedModel."""
  return bool(location) and tf.io.gfile.exists(
    os.path.join(location.local_path, "saved_model.pb")
  )
