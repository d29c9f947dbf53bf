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

from ctl.checkpoint import export as export_lib
from ctl.errors import Preempted
from ctl.errors import write_failure
from ctl.io import fencing
from ctl.io.outputs import SUMMARY_FILE
from ctl.resilience import preemption
from ctl.telemetry import goodput as goodput_lib
from ctl.telemetry import progress as progress_lib
from ctl.telemetry import summaries


def export(
  *,
  model: tf.keras.Model,
  serving,
  location,
  step: int,
  trained: bool,
  progress: progress_lib.Progress,
  fence: fencing.Fence = fencing.OPEN,
) -> None:
  """Exports the SavedModel unless the committed one already holds `step`.

  A run that trained always exports; one that did not exports again when the
  committed SavedModel is missing or holds another step (an export killed
  before it committed), and otherwise still removes what a killed export
  left beside it. A stop asked for during the export lets it commit, then
  stops the run.

  Args:
    model: the trained model, at `step`.
    serving: the `serving_default` signature (ctl.checkpoint.export's
      `serving_archive`); None: the run exports nothing.
    location: the chief's export location (ctl.io.outputs), or None.
    step: the global step of `model`.
    trained: whether this run trained any step.
    progress: marks the export phase.
    fence: the lease's fence (ctl.io.fencing), checked before the commit.

  Raises:
    Preempted: a stop was requested during the export (after it committed).
    LeaseLost: another trainer took the lease; nothing was committed.
    CannotWrite: the export directory refused the files (disk full,
      permission lost); a SavedModel committed before is left in place.
  """
  if serving is None:
    return
  if not trained and export_lib.exported_step(location) == step:
    export_lib.remove_leftovers(location, fence=fence)
    return
  with preemption.StopRequest() as stop, progress.phase(progress_lib.EXPORT):
    try:
      export_lib.export_saved_model(
        model=model,
        serving=serving,
        location=location,
        step=step,
        fence=fence,
      )
    except (OSError, tf.errors.OpError) as e:
      failure = location and write_failure(
        f"the SavedModel of step {step}", location.local_path, e
      )
      if not failure:
        raise
      raise failure from e
  if stop.requested:
    raise Preempted(step, stop.signal)


def write_summary(
  location, summary: dict, *, fence: fencing.Fence = fencing.OPEN
) -> None:
  """Writes `summary` to `<model dir>/train_summary.json` (chief: `location`).

  Raises:
    LeaseLost: another trainer took the lease (`fence`); nothing written.
  """
  if not location:
    return
  fence.check("the run summary")
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
  for note in accounting.notes:
    logging.warning("Goodput: %s", note)
  return accounting.summary()


def log_done(summary: dict, *, model_dir: str) -> None:
  """The run's last line: where it ended, its last evaluation's metrics
  (the loss last), and where its summary is."""
  evaluated = {
    key[len("eval_") :]: value
    for key, value in summary.items()
    if key.startswith("eval_") and value is not None
  }
  if "loss" in evaluated:
    evaluated["loss"] = evaluated.pop("loss")
  metrics = ", ".join(f"{k} {v:.4f}" for k, v in evaluated.items()) or "n/a"
  logging.info(
    "Done at step %d: eval %s, weights fingerprint %s; summary in %s.",
    summary["final_step"],
    metrics,
    summary["weights_fingerprint"][:16],
    os.path.join(model_dir, SUMMARY_FILE),
  )
