"""Floating-point operations of a Keras model, counted from its layers.

Convolutions and dense layers are counted at 2 FLOPs per multiply-add, the
same convention as the matmul peak (2 n^3 for an n x n product), so their
ratio is a utilisation. Batch norm, activations, pooling and additions are
left out (TensorFlow's graph profiler, which counts them, gives 7.76e9 for
the trainer's ResNet50 at 224x224 against 7.72e9 here). The "~4 GFLOPs"
usually quoted for ResNet50 counts multiply-adds (3.9e9 here).
A training step costs about 3 forward passes (the forward, and a backward
pass computing gradients for both activations and weights).
"""

import math

import keras

TRAINING_PASSES = 3


def forward_flops_per_example(model: keras.Model) -> int:
  """FLOPs of one example's forward pass through the conv and dense layers.

  Args:
    model: a built functional Keras model (layers know their output shapes).

  Returns:
    The FLOP count.
  """
  total = 0
  for layer in _leaves(model):
    if isinstance(layer, keras.layers.Conv2D):  # Not depthwise/transposed.
      _, height, width, channels_out = layer.output.shape
      kernel_height, kernel_width = layer.kernel_size
      channels_in = layer.input.shape[-1] // layer.groups
      total += (
        2
        * height
        * width
        * channels_out
        * kernel_height
        * kernel_width
        * channels_in
      )
    elif isinstance(layer, keras.layers.Dense):
      positions = math.prod(layer.input.shape[1:-1])
      total += 2 * positions * layer.input.shape[-1] * layer.units
  return int(total)


def training_flops_per_example(model: keras.Model) -> int:
  """About 3 forward passes: see the module docstring."""
  return TRAINING_PASSES * forward_flops_per_example(model)


def _leaves(layer):
  children = getattr(layer, "layers", None)
  if not children:
    yield layer
    return
  for child in children:
    yield from _leaves(child)
