"""ctl: a fault-tolerant custom-training-loop framework for TensorFlow.

The framework knows nothing of models, datasets or absl flags: it takes plain
Python objects (`controller.Task`, `controller.RunOptions`) and a strategy.
"""
