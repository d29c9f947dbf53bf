"""App: the goodput benchmark's Keras side, one `model.fit` attempt.

  python -m benchmarks.workloads.goodput_keras --backup_dir=D --progress=P --epochs=4

trains the trainer's small CNN on digits with `model.fit` and
`keras.callbacks.BackupAndRestore(save_freq=N)`, as the Keras documentation
tells users to make a job survive restarts: run the same command again after
a failure. It appends one JSON line per batch to --progress (the position in
the job, and when the batch began and ended), so the benchmark knows how many
steps were redone; with --kill_at_step it SIGKILLs itself at the end of the
batch that reaches that position (after its backup and its line), the
benchmark's kill; at the end it writes the weights fingerprint to
`<progress>.done`.
"""

import json
import os
import signal
import time

from absl import app
from absl import flags

flags.DEFINE_string("backup_dir", None, "BackupAndRestore directory.")
flags.DEFINE_string("progress", None, "Per-batch JSON lines go here.")
flags.DEFINE_integer("epochs", 4, "model.fit epochs.")
flags.DEFINE_integer("save_freq", 20, "BackupAndRestore save_freq (steps).")
flags.DEFINE_integer("image_size", 16, "Image side.")
flags.DEFINE_integer("batch_size", 32, "Global batch.")
flags.DEFINE_float("learning_rate", 0.003, "Adam learning rate.")
flags.DEFINE_float("dropout", 0.1, "Dropout before the last layer.")
flags.DEFINE_integer("seed", 0, "Seed of initialization and data order.")
flags.DEFINE_integer(
  "kill_at_step",
  0,
  "SIGKILL this process at the end of the batch that reaches this job "
  "position (the benchmark's kill); 0: never.",
)

FLAGS = flags.FLAGS


def main(argv):
  del argv  # Unused.
  # pylint: disable=g-import-not-at-top  (the flags answer before TF loads)
  import keras
  import tensorflow as tf

  from ctl.checkpoint import checkpointing
  from ctl.data import input as input_lib
  from trainer import data as data_lib

  tf.config.experimental.enable_op_determinism()
  keras.utils.set_random_seed(FLAGS.seed)
  source = data_lib.load("digits", image_size=FLAGS.image_size)
  steps_per_epoch = input_lib.steps_per_epoch(
    source.num_train, FLAGS.batch_size
  )
  dataset = source.train_dataset(
    global_batch_size=FLAGS.batch_size, seed=FLAGS.seed
  )
  model, optimizer = _compiled_model(source)
  model.fit(
    dataset,
    epochs=FLAGS.epochs,
    steps_per_epoch=steps_per_epoch,
    verbose=0,
    callbacks=[
      keras.callbacks.BackupAndRestore(
        FLAGS.backup_dir, save_freq=FLAGS.save_freq
      ),
      _progress_callback(steps_per_epoch),
    ],
  )
  with open(FLAGS.progress + ".done", "w") as f:
    json.dump(
      {
        "weights_fingerprint": checkpointing.weights_fingerprint(
          model, optimizer
        ),
        "steps": FLAGS.epochs * steps_per_epoch,
      },
      f,
    )


def _compiled_model(source):
  """The trainer's small CNN for `source`, compiled with Adam; returns
  (model, optimizer)."""
  import keras  # pylint: disable=g-import-not-at-top

  from ctl.train import optimizers  # pylint: disable=g-import-not-at-top
  from trainer import model as model_lib  # pylint: disable=g-import-not-at-top

  model = model_lib.build_model(
    name="small_cnn",
    num_classes=source.num_classes,
    image_shape=source.image_shape,
    dropout=FLAGS.dropout,
  )
  # The trainer's optimizer, so the two sides differ only in how they run.
  optimizer = optimizers.Adam(FLAGS.learning_rate)
  model.compile(
    optimizer=optimizer,
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
  )
  return model, optimizer


def _progress_callback(steps_per_epoch: int):
  """A callback appending one JSON line per batch to --progress: the job
  position the batch reached, and when it began and ended; it SIGKILLs the
  process once that position reaches --kill_at_step. Listed after
  BackupAndRestore, so that batch's backup, if due, is written first."""
  import keras  # pylint: disable=g-import-not-at-top

  class Progress(keras.callbacks.Callback):
    """One line per batch: the job position it reached, and its times; the
    kill at --kill_at_step."""

    def __init__(self):
      super().__init__()
      # Open for the whole fit; closed when the process exits.
      self._file = open(FLAGS.progress, "a")
      self._epoch = 0
      self._began = 0.0

    def on_epoch_begin(self, epoch, logs=None):
      self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
      self._began = time.time()

    def on_train_batch_end(self, batch, logs=None):
      step = self._epoch * steps_per_epoch + batch + 1
      self._file.write(
        json.dumps({"step": step, "t0": self._began, "t1": time.time()}) + "\n"
      )
      self._file.flush()
      if 0 < FLAGS.kill_at_step <= step:
        os.kill(os.getpid(), signal.SIGKILL)

  return Progress()


if __name__ == "__main__":
  flags.mark_flags_as_required(["backup_dir", "progress"])
  app.run(main)
