"""From `model.fit` + `BackupAndRestore` to `ctl.run`: the same model and data.

`own_model.py`'s CNN, data and loss, trained to the same 60 steps both ways.
What changes for you:

- What you hand over. `fit` takes a compiled model and a dataset object.
  `ctl.run` takes a `ctl.Task` of callables (it builds the model and
  optimizer under the strategy's scope) whose train data is a function of
  `(input_context, start_step, seed)`: the data is a function of the step, so
  a restarted job knows where in the data it is. The loss returns one value
  per example (ctl averages it over the global batch, the `tf.distribute`
  way); the model returns logits; loss and accuracy are built in, no
  `compile()`.
- Steps are targets. `fit(epochs=2)` counts epochs, and
  `BackupAndRestore` remembers the epoch it was in. `train_steps=60` means
  "until the global step is 60": the same call after any stop continues
  from the newest checkpoint and ends at step 60 (a finished run trains
  nothing); a larger `train_steps` continues the same run.
- Exact resume. `BackupAndRestore` restores the weights, the optimizer and
  the epoch number: a restart mid-epoch runs that epoch again from its
  first batch, on a data order that starts over, with fresh dropout random
  state. ctl restores the step, the data position and the random state too,
  so a killed and resumed run ends with the same weights bit for bit as an
  uninterrupted one (`own_model.py` shows it).
- The run directory. `BackupAndRestore` keeps one backup and deletes it
  when `fit` returns; what remains is what you save yourself. A ctl run
  directory keeps the last checkpoints (`checkpoints/`), TensorBoard logs
  (`tensorboard/train`, `tensorboard/validation`), a SavedModel
  (`saved_model/`), `train_summary.json` (final step, metrics,
  `weights_fingerprint`) and the run ledger (`ledger/`: every start, stop
  and save, with times); one job writes to it at a time.

  python examples/from_model_fit.py [--model_dir=/tmp/from_fit]
"""

import argparse
import os
import sys
import tempfile

import keras
import own_model  # This folder: the model, the data, the loss, ctl's Task.
import tensorflow as tf

import ctl

STEPS_PER_EPOCH = 30


def with_model_fit(backup_dir: str) -> float:
  """Trains with Keras' own loop; returns the validation accuracy."""
  keras.utils.set_random_seed(0)
  images, labels = own_model.make_data(1024, seed=1)
  train = (
    tf.data.Dataset.from_tensor_slices((images, labels))
    .shuffle(len(images), seed=0)
    .repeat()
    .batch(own_model.GLOBAL_BATCH, drop_remainder=True)
  )
  valid = tf.data.Dataset.from_tensor_slices(
    own_model.make_data(256, seed=2)
  ).batch(own_model.GLOBAL_BATCH)

  model = own_model.build_model()
  model.compile(
    optimizer=keras.optimizers.Adam(0.01),
    loss=own_model.smoothed_cross_entropy,
    metrics=["sparse_categorical_accuracy"],
  )
  model.fit(
    train,
    epochs=own_model.TRAIN_STEPS // STEPS_PER_EPOCH,  # Epochs, not steps.
    steps_per_epoch=STEPS_PER_EPOCH,
    callbacks=[keras.callbacks.BackupAndRestore(backup_dir)],
    verbose=2,
  )
  _, accuracy = model.evaluate(valid, verbose=0)
  return accuracy


def with_ctl(model_dir: str) -> float:
  """Trains with `ctl.run`; returns the validation accuracy."""
  keras.utils.set_random_seed(0)
  summary = ctl.run(
    task=own_model.make_task(),
    options=own_model.make_options(model_dir),
    strategy=tf.distribute.get_strategy(),
  )
  return summary["eval_accuracy"]


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", default=None)
  args = parser.parse_args(argv)
  root = args.model_dir or tempfile.mkdtemp(prefix="from_model_fit_")
  backup_dir = os.path.join(root, "fit_backup")
  fit_accuracy = with_model_fit(backup_dir)
  ctl_dir = os.path.join(root, "ctl_run")
  ctl_accuracy = with_ctl(ctl_dir)
  print(
    f"model.fit: eval accuracy {fit_accuracy:.3f}; {backup_dir} "
    f"{'remains' if os.path.exists(backup_dir) else 'was deleted'}."
  )
  print(
    f"ctl.run: eval accuracy {ctl_accuracy:.3f}; {ctl_dir} holds "
    f"{', '.join(sorted(os.listdir(ctl_dir)))}."
  )
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
