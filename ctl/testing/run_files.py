"""Reading what a run wrote, as a test or a benchmark checks it."""

import json
import os
import re


def read_summary(model_dir: str) -> dict:
  """The chief's `<model_dir>/train_summary.json` (a local directory)."""
  with open(os.path.join(model_dir, "train_summary.json")) as f:
    return json.load(f)


def listed_steps(state: str) -> list[int]:
  """The checkpoint steps a state file's text (`checkpoints/checkpoint`)
  lists, oldest first. Read as text, not through TensorFlow: a test that
  watches a run must not spend the seconds of importing it (longer, on a
  loaded machine, than the moment it watches for)."""
  return sorted(
    int(step)
    for step in re.findall(
      r'^all_model_checkpoint_paths: ".*?ckpt-(\d+)"$', state, re.MULTILINE
    )
  )


def read_scalars(logdir: str) -> dict[str, list[tuple[int, float]]]:
  """Every scalar in the event files under `logdir`: {tag: [(step, value)]}.

  TF2 summaries are stored as tensors, so they are read through the
  accumulator's tensor API.
  """
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  accumulator = event_accumulator.EventAccumulator(
    logdir, size_guidance={event_accumulator.TENSORS: 0}
  )
  accumulator.Reload()
  return {
    tag: [
      (e.step, float(tf.make_ndarray(e.tensor_proto)))
      for e in accumulator.Tensors(tag)
    ]
    for tag in accumulator.Tags()["tensors"]
  }
