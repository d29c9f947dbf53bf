"""ctl: a fault-tolerant custom-training-loop framework for TensorFlow.

The framework knows nothing of models, datasets or absl flags: it takes plain
Python objects (`options.Task`, `options.RunOptions`) and a strategy.
"""
