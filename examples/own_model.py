"""Your own Keras model and tf.data pipeline, trained with `ctl.run`.

Nothing here comes from `trainer/`: a small CNN, NumPy arrays made on the spot,
a custom loss, and `ctl.Task` / `ctl.RunOptions` written out. The example
trains the same run twice, to step 60 with a checkpoint every 20 steps:

  1. uninterrupted, in `MODEL_DIR/uninterrupted`;
  2. in `MODEL_DIR/resumed`: first in a child process that SIGKILLs itself at
     step 50 (nothing is saved on the way out), then the very same call
     again, which resumes from the step-40 checkpoint.

Both end with the same `weights_fingerprint` (a SHA-256 of every weight and
optimizer slot): a checkpoint holds everything that decides the next step,
and the data a step sees is a function of the step, not of an iterator.

  python examples/own_model.py [--model_dir=/tmp/own_model]

Exit status 0 when the fingerprints agree, 1 when they do not. It prints
only its own lines and ctl's warnings: ctl logs through absl, whose INFO
lines (progress, `Restored step`, `Done at`) show under `absl.app.run` or
after `absl.logging.set_verbosity(absl.logging.INFO)`. docs/framework.md,
"API reference", lists every field of `ctl.Task` and `ctl.RunOptions`.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

import ctl
from ctl.data import input as ctl_input
from ctl.io.outputs import OutputDirs

IMAGE_SHAPE = (8, 8, 1)
NUM_CLASSES = 3
GLOBAL_BATCH = 32
TRAIN_STEPS = 60
CRASH_AT_STEP = 50


def make_data(num_examples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Noisy images whose class is the brightest third (top, middle, bottom)."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, NUM_CLASSES, size=num_examples)
  images = rng.normal(0.0, 0.5, size=(num_examples, *IMAGE_SHAPE))
  for third in range(NUM_CLASSES):
    rows = slice(third * 3, third * 3 + 2)
    images[labels == third, rows] += 1.0
  return images.astype(np.float32), labels.astype(np.int64)


def build_model() -> keras.Model:
  """A small CNN mapping images to logits (dropout included: its random
  state is checkpointed too)."""
  return keras.Sequential(
    [
      keras.Input(IMAGE_SHAPE),
      keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
      keras.layers.GlobalAveragePooling2D(),
      keras.layers.Dropout(0.1),
      keras.layers.Dense(NUM_CLASSES),
    ]
  )


def smoothed_cross_entropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
  """The custom loss: cross-entropy with label smoothing, one value per
  example (ctl averages it over the global batch)."""
  labels = tf.cast(labels, tf.int32)  # `model.fit` passes them as floats.
  targets = tf.one_hot(labels, NUM_CLASSES) * 0.9 + 0.1 / NUM_CLASSES
  return tf.nn.softmax_cross_entropy_with_logits(targets, logits)


def make_task() -> ctl.Task:
  """What to train: plain callables; ctl calls them under the strategy."""
  # The first batch of `start_step` is that step's: on resume the data
  # continues where the checkpoint is, in a seeded order (ctl.data.input).
  train_dataset_fn, eval_dataset_fn = ctl_input.dataset_fns(
    train_records=ctl_input.IndexedRecords.from_tensors(make_data(1024, 1)),
    eval_records=ctl_input.IndexedRecords.from_tensors(make_data(256, 2)),
    decode_fn=lambda image, label: (image, label),  # No decoding needed.
    global_batch_size=GLOBAL_BATCH,
  )
  # Images -> logits with sparse labels: the ready-made task (an accuracy
  # metric and a serving_default(images) export), with a loss of our own.
  return ctl.image_classification(
    build_model=build_model,
    build_optimizer=lambda: keras.optimizers.Adam(0.01),
    train_dataset_fn=train_dataset_fn,
    eval_dataset_fn=eval_dataset_fn,
    global_batch_size=GLOBAL_BATCH,
    image_shape=IMAGE_SHAPE,
    loss_fn=smoothed_cross_entropy,
  )


def make_options(model_dir: str) -> ctl.RunOptions:
  """How to train: where, to which step, and how often to save."""
  return ctl.RunOptions(
    dirs=OutputDirs(
      model_dir=model_dir,
      checkpoint_dir=os.path.join(model_dir, "checkpoints"),
      tensorboard_dir=os.path.join(model_dir, "tensorboard"),
      export_dir=os.path.join(model_dir, "saved_model"),
    ),
    train_steps=TRAIN_STEPS,  # A target: "until the global step is 60".
    steps_per_loop=10,
    log_every_steps=10,
    eval_every_steps=30,
    checkpoint_every_steps=20,
    checkpoint_every_secs=0,  # Step-based saves only, for a fixed story.
    seed=0,
  )


def train(model_dir: str, crash_at_step: int | None = None) -> dict:
  """One `ctl.run` call; with `crash_at_step`, SIGKILLs this process there."""
  tf.config.experimental.enable_op_determinism()  # Bitwise-repeatable ops.
  keras.utils.set_random_seed(0)  # The initial weights.
  listeners = ()
  if crash_at_step:  # A progress listener sees every phase and step.
    listeners = (
      lambda mark: (
        mark.step >= crash_at_step and os.kill(os.getpid(), signal.SIGKILL)
      ),
    )
  return ctl.run(
    task=make_task(),
    options=make_options(model_dir),
    strategy=tf.distribute.get_strategy(),  # One device; or Mirrored, ...
    progress_listeners=listeners,
  )


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", default=None)
  parser.add_argument("--crash_at_step", type=int, default=None)  # Internal.
  args = parser.parse_args(argv)
  if args.crash_at_step:
    train(args.model_dir, crash_at_step=args.crash_at_step)
    return 1  # Not reached: the process killed itself.
  root = args.model_dir or tempfile.mkdtemp(prefix="own_model_")
  uninterrupted = train(os.path.join(root, "uninterrupted"))

  resumed_dir = os.path.join(root, "resumed")
  child = subprocess.run(
    [
      sys.executable,
      __file__,
      f"--model_dir={resumed_dir}",
      f"--crash_at_step={CRASH_AT_STEP}",
    ],
    check=False,
  )
  print(
    f"The first try of {resumed_dir} ended with {child.returncode} "
    f"(-{signal.SIGKILL.value}: SIGKILL); running the same call again."
  )
  resumed = train(resumed_dir)

  for name, summary in (("uninterrupted", uninterrupted), ("resumed", resumed)):
    print(
      f"{name}: step {summary['final_step']}, "
      f"restores {summary['restores']}, eval accuracy "
      f"{summary['eval_accuracy']:.3f}, "
      f"weights_fingerprint {summary['weights_fingerprint']}"
    )
  same = uninterrupted["weights_fingerprint"] == resumed["weights_fingerprint"]
  print("Same weights, bit for bit." if same else "The weights DIFFER.")
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
