"""Dict inputs and two heads with `ctl.run`: token ids and float features,
labels by head, sample weights, and metrics bound to one head each.

Each example is a short "review": 8 token ids (int32, through an Embedding)
beside 4 float features; its labels say whether it is positive (`positive`,
a logit head) and what its score is (`score`, a regression head), and each
example has a weight (positives count twice: they are rarer). Batches are
`({"tokens": ..., "features": ...}, {"positive": ..., "score": ...},
weight)`, as `model.fit` takes them; the loss and the metrics are weighted,
and each metric reads its own head and label, named as Keras's
`compile(metrics={"positive": [...], "score": [...]})` names them
(`ctl.OnOutput`). The SavedModel's `serving_default` takes the same dict
and returns both heads by name:

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
  """Records (tokens, features, label, score, weight): the score counts the
  review's "good" tokens (ids below 10) less its "bad" ones (40 and up),
  nudged by the first feature; positive when it is above 0.5."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, VOCABULARY, size=(count, LENGTH), dtype=np.int32)
  features = rng.normal(size=(count, FEATURES)).astype(np.float32)
  score = (tokens < 10).sum(1) - (tokens >= 40).sum(1) + 0.5 * features[:, 0]
  label = (score > 0.5).astype(np.float32)
  weight = np.where(label > 0, 2.0, 1.0).astype(np.float32)
  return tokens, features, label, score.astype(np.float32), weight


def as_batch_element(tokens, features, label, score, weight):
  """A record as `model.fit` takes it: (inputs, labels by head, weight)."""
  inputs = {"tokens": tokens, "features": features}
  # The score as [1], as the score head gives it: a Keras regression metric
  # averages over the last axis, one value per example.
  return inputs, {"positive": label, "score": score[None]}, weight


def build_model() -> keras.Model:
  """An embedding of the tokens, averaged, beside the features: a logit
  (`positive`, [batch]) and a score (`score`, [batch, 1])."""
  tokens = keras.Input((LENGTH,), dtype="int32", name="tokens")
  features = keras.Input((FEATURES,), name="features")
  embedded = keras.layers.Embedding(VOCABULARY, 8)(tokens)
  pooled = keras.layers.GlobalAveragePooling1D()(embedded)
  joined = keras.layers.Concatenate()([pooled, features])
  hidden = keras.layers.Dense(16, activation="relu")(joined)
  logit = keras.layers.Reshape((), name="positive")(
    keras.layers.Dense(1)(hidden)
  )
  score = keras.layers.Dense(1, name="score")(hidden)
  return keras.Model(
    {"tokens": tokens, "features": features},
    {"positive": logit, "score": score},
  )


def loss(labels, outputs):
  """Per example: the logit's cross-entropy and the score's squared error
  (scaled to a similar size); ctl weighs it by the batch's third element."""
  cross_entropy = tf.nn.sigmoid_cross_entropy_with_logits(
    labels=labels["positive"], logits=outputs["positive"]
  )
  error = labels["score"][:, 0] - outputs["score"][:, 0]
  return cross_entropy + 0.05 * tf.square(error)


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
    loss_fn=loss,
    build_metrics=lambda: {  # Each reads its own head and label.
      "auc": ctl.OnOutput("positive", keras.metrics.AUC(from_logits=True)),
      "accuracy": ctl.OnOutput(
        "positive", keras.metrics.BinaryAccuracy(threshold=0.0)
      ),
      "score_mae": ctl.OnOutput("score", keras.metrics.MeanAbsoluteError()),
    },
  )


if __name__ == "__main__":
  sys.exit(
    regression.run_example(  # Its command line and ctl.run call.
      sys.argv[1:],
      make_task,
      report=(
        "final_step",
        "eval_loss",
        "eval_auc",
        "eval_accuracy",
        "eval_score_mae",
      ),  # fmt: skip
      steps_per_loop=10,
      log_every_steps=20,
      eval_every_steps=60,
      checkpoint_every_steps=30,
    )
  )
