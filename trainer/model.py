"""Models: ResNet50 with the Vertex AI codelab's head, and a small CNN.

Both map float images in [0, 1] to float32 logits: the last layer computes in
float32 whatever the mixed-precision policy, so softmax and the loss stay
numerically safe under `mixed_bfloat16` / `mixed_float16`.
"""

import keras

from ctl import UserError

from . import checks

MODELS = ("resnet50", "small_cnn")


def build_model(
  *,
  name: str,
  num_classes: int,
  image_shape: tuple[int, int, int],
  weights: str = "none",
  dropout: float = 0.0,
) -> keras.Model:
  """Builds a classifier that outputs logits.

  Args:
    name: one of MODELS.
    num_classes: size of the output layer.
    image_shape: (height, width, channels).
    weights: for resnet50: "none" (random init), "imagenet" (downloads on
      machines that can), or the path of a local backbone weights file (as
      saved by `keras.applications.ResNet50(include_top=False)`).
    dropout: rate of a Dropout layer before the last Dense layer (0: none).

  Returns:
    An uncompiled Keras model.

  Raises:
    UserError: unknown model, weights file not found, or imagenet weights
      that cannot be downloaded.
  """
  if not 0.0 <= dropout < 1.0:
    raise UserError(f"--dropout must be in [0, 1), got {dropout}.")
  if name not in MODELS:
    raise UserError(
      f"Unknown model {name!r}; choose one of {', '.join(MODELS)}."
    )
  checks.check_weights(name=name, weights=weights)
  if name == "resnet50":
    return _resnet50(num_classes, image_shape, weights, dropout)
  return _small_cnn(num_classes, image_shape, dropout)


def _resnet50(num_classes, image_shape, weights, dropout) -> keras.Model:
  """ResNet50 without top + global average pooling + Dense(1016) + Dense."""
  try:
    backbone = keras.applications.ResNet50(
      include_top=False,
      input_shape=image_shape,
      weights=None if weights == "none" else weights,
    )
  except Exception as e:  # Keras raises several types for a failed download.
    if weights == "imagenet":
      raise UserError(
        "Could not download the ImageNet weights for ResNet50 "
        f"({type(e).__name__}); on an offline machine pass "
        "--weights=PATH to a local file."
      ) from None
    raise UserError(
      f"Could not load weights from {weights}: {str(e).splitlines()[0][:160]}"
    ) from None
  x = keras.layers.GlobalAveragePooling2D()(backbone.output)
  x = keras.layers.Dense(1016, activation="relu")(x)
  return keras.Model(
    backbone.input,
    _classifier(x, num_classes, dropout),
    name="resnet50_transfer",
  )


def _small_cnn(num_classes, image_shape, dropout) -> keras.Model:
  """A small CNN for tests and the offline demo (trains in seconds on CPU)."""
  inputs = keras.Input(image_shape)
  x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
  x = keras.layers.MaxPooling2D()(x)
  x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
  x = keras.layers.MaxPooling2D()(x)
  x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
  x = keras.layers.GlobalAveragePooling2D()(x)
  return keras.Model(
    inputs, _classifier(x, num_classes, dropout), name="small_cnn"
  )


def _classifier(features, num_classes, dropout):
  """Optional Dropout, then float32 logits (whatever the dtype policy).

  Dropout draws from a Keras SeedGenerator whose state the checkpoint saves
  (ctl.checkpoint.checkpointing), so a resumed run draws the same masks.
  """
  if dropout:
    features = keras.layers.Dropout(dropout)(features)
  return keras.layers.Dense(num_classes, dtype="float32", name="logits")(
    features
  )
