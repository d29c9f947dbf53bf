"""Dict inputs with `ctl.run`: token ids and float features, sample weights.

Each example is a short "review": 8 token ids (int32, through an Embedding)
beside 4 float features; the label says whether it is positive, and each
example has a weight (positives count twice: they are rarer). Batches are
`({"tokens": ..., "features": ...}, label, weight)`, as `model.fit` takes
them; the loss and both metrics (AUC and binary accuracy) are weighted. The
SavedModel's `serving_default` takes the same dict:

  python examples/dict_inputs.py --model_dir=/tmp/dict_inputs
  saved_model_cli run --dir /tmp/dict_inputs/saved_model \
      --tag_set serve --signature_def serving_default \
      --input_exprs 'tokens=[[1,2,3,4,5,6,7,8]];features=[[0.,0.,0.,0.]]'

It prints the chief's summary as one JSON line; under `ctl-launch` a run
killed at any point and started again ends with the same line.
"""

import sys

import keras
import numpy as np
import regression  # examples/regression.py: its run_example.
import tensorflow as tf

import ctl
from ctl.data import input as ctl_input

VOCABULARY, LENGTH, FEATURES = 50, 8, 4
GLOBAL_BATCH = 32


def make_data(count: int, seed: int):
  """Records (tokens, features, label, weight): positive when the review
  holds more "good" tokens (ids below 10) than "bad" ones (40 and up),
  nudged by the first feature."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, VOCABULARY, size=(count, LENGTH), dtype=np.int32)
  features = rng.normal(size=(count, FEATURES)).astype(np.float32)
  score = (tokens < 10).sum(1) - (tokens >= 40).sum(1) + 0.5 * features[:, 0]
  label = (score > 0.5).astype(np.float32)
  weight = np.where(label > 0, 2.0, 1.0).astype(np.float32)
  return tokens, features, label, weight


def as_batch_element(tokens, features, label, weight):
  """A record as `model.fit` takes it: (inputs dict, label, weight)."""
  return {"tokens": tokens, "features": features}, label, weight


def build_model() -> keras.Model:
  """An embedding of the tokens, averaged, beside the features: one logit."""
  tokens = keras.Input((LENGTH,), dtype="int32", name="tokens")
  features = keras.Input((FEATURES,), name="features")
  embedded = keras.layers.Embedding(VOCABULARY, 8)(tokens)
  pooled = keras.layers.GlobalAveragePooling1D()(embedded)
  joined = keras.layers.Concatenate()([pooled, features])
  hidden = keras.layers.Dense(16, activation="relu")(joined)
  logit = keras.layers.Reshape(())(keras.layers.Dense(1)(hidden))
  return keras.Model({"tokens": tokens, "features": features}, logit)


def make_task() -> ctl.Task:
  """The model, its weighted loss and metrics, and the data."""
  train_dataset_fn, eval_dataset_fn = ctl_input.dataset_fns(
    train_records=ctl_input.IndexedRecords.from_tensors(make_data(1024, 1)),
    eval_records=ctl_input.IndexedRecords.from_tensors(make_data(256, 2)),
    decode_fn=as_batch_element,
    global_batch_size=GLOBAL_BATCH,
  )
  return ctl.Task(
    build_model=build_model,
    build_optimizer=lambda: keras.optimizers.Adam(0.01),
    train_dataset_fn=train_dataset_fn,
    eval_dataset_fn=eval_dataset_fn,
    global_batch_size=GLOBAL_BATCH,
    # Per example; ctl weighs it by the batch's third element.
    loss_fn=lambda label, logit: tf.nn.sigmoid_cross_entropy_with_logits(
      labels=label, logits=logit
    ),
    build_metrics=lambda: {
      "auc": keras.metrics.AUC(from_logits=True),
      "accuracy": keras.metrics.BinaryAccuracy(threshold=0.0),
    },
  )


if __name__ == "__main__":
  sys.exit(
    regression.run_example(  # Its command line and ctl.run call.
      sys.argv[1:],
      make_task,
      report=("final_step", "eval_loss", "eval_auc", "eval_accuracy"),
      steps_per_loop=10,
      log_every_steps=20,
      eval_every_steps=60,
      checkpoint_every_steps=30,
    )
  )
