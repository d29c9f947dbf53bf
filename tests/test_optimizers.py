"""ctl.train.optimizers: Keras's updates, one fused kernel per variable."""

import json
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from ctl.train import optimizers
from trainer.testing import run_command

SHAPES = ((3, 3, 2, 4), (4,), (7, 5), (5,))
# (name, ctl class, Keras class, keyword arguments)
CASES = (
  ("adam", optimizers.Adam, keras.optimizers.Adam, {"learning_rate": 0.05}),
  ("sgd", optimizers.SGD, keras.optimizers.SGD, {"learning_rate": 0.1}),
  (
    "momentum",
    optimizers.SGD,
    keras.optimizers.SGD,
    {"learning_rate": 0.1, "momentum": 0.9},
  ),
  (
    "nesterov",
    optimizers.SGD,
    keras.optimizers.SGD,
    {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True},
  ),
  (
    "adam, weight decay and clipping",
    optimizers.Adam,
    keras.optimizers.Adam,
    {"learning_rate": 0.05, "weight_decay": 0.01, "global_clipnorm": 1.0},
  ),
)


# Float32 rounding differs with the order of the same operations: within
# this, 1/5000 of one step's change (the rates move weights by ~0.05).
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _gradients(steps, seed=0):
  rng = np.random.RandomState(seed)
  return [
    [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    for _ in range(steps)
  ]


def _trained(optimizer, gradients, compiled):
  rng = np.random.RandomState(1)
  variables = [
    tf.Variable(rng.normal(size=s).astype(np.float32)) for s in SHAPES
  ]
  optimizer.build(variables)

  def apply(grads):
    optimizer.apply_gradients(zip(grads, variables))

  apply = tf.function(apply) if compiled else apply
  for grads in gradients:
    apply([tf.constant(g) for g in grads])
  return [v.numpy() for v in variables], optimizer


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize(
  "ours, theirs, kwargs", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_fused_update_is_keras_update(ours, theirs, kwargs, compiled):
  gradients = _gradients(6)
  fused, fused_optimizer = _trained(ours(**kwargs), gradients, compiled)
  keras_weights, keras_optimizer = _trained(
    theirs(**kwargs), gradients, compiled
  )
  for a, b in zip(fused, keras_weights):
    np.testing.assert_allclose(a, b, **TOLERANCE)
  # The slots too: a checkpoint of one restores into the other and goes on.
  for a, b in zip(fused_optimizer.variables, keras_optimizer.variables):
    assert a.name == b.name
    np.testing.assert_allclose(a.numpy(), b.numpy(), **TOLERANCE)
  # The weights moved: a no-op update would match a no-op update.
  assert not np.allclose(fused[0], _trained(ours(**kwargs), [], False)[0][0])


def test_amsgrad_and_sparse_gradients_fall_back_to_keras():
  gradients = _gradients(3)
  fused, _ = _trained(optimizers.Adam(0.05, amsgrad=True), gradients, True)
  expected, _ = _trained(
    keras.optimizers.Adam(0.05, amsgrad=True), gradients, True
  )
  for a, b in zip(fused, expected):
    np.testing.assert_allclose(a, b, **TOLERANCE)
  table = tf.Variable(np.ones((4, 2), np.float32))
  optimizer = optimizers.Adam(0.1)
  optimizer.build([table])
  sparse = tf.IndexedSlices(
    tf.ones((1, 2)), tf.constant([2]), tf.constant([4, 2])
  )
  optimizer.apply_gradients([(sparse, table)])
  changed = np.any(table.numpy() != 1.0, axis=1)
  assert changed.tolist() == [False, False, True, False]


def _update_ops(optimizer) -> int:
  """The ops one traced `apply_gradients` holds."""
  variables = [tf.Variable(tf.zeros(s)) for s in SHAPES]
  optimizer.build(variables)
  grads = [tf.TensorSpec(s) for s in SHAPES]
  apply = tf.function(lambda g: optimizer.apply_gradients(zip(g, variables)))
  return len(apply.get_concrete_function(grads).graph.get_operations())


@pytest.mark.parametrize(
  "ours, theirs, kwargs",
  [c[1:] for c in CASES if c[0] in ("adam", "momentum", "nesterov")],
  ids=["adam", "momentum", "nesterov"],
)
def test_the_fused_update_traces_fewer_ops(ours, theirs, kwargs):
  """What a restart traces and TensorFlow optimizes: per variable, Keras
  writes Adam and momentum as a dozen ops or more; the fused update is a
  kernel and its few inputs. (Plain SGD is two ops either way.)"""
  fused, unfused = _update_ops(ours(**kwargs)), _update_ops(theirs(**kwargs))
  per_variable = (unfused - fused) / len(SHAPES)
  assert per_variable >= 5, (fused, unfused)


# Runs in a fresh interpreter: logical devices must be configured before
# TensorFlow initializes, which the pytest process has already done.
_REPLICAS_SCRIPT = r"""
import json
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
from ctl.train import optimizers

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
result = {}
for name, make in (("fused", optimizers.Adam), ("keras", keras.optimizers.Adam)):
  with strategy.scope():
    variable = tf.Variable(np.arange(6, dtype=np.float32))
    optimizer = make(0.1)
    optimizer.build([variable])

  def replica_step(scale):
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    gradient = scale * tf.cast(replica + 1, tf.float32) * tf.ones([6])
    optimizer.apply_gradients([(gradient, variable)])

  @tf.function
  def step(scale):
    strategy.run(replica_step, args=(scale,))

  for scale in (1.0, -2.0, 0.5):
    step(tf.constant(scale))
  result[name] = [v.numpy().tolist() for v in variable.values]
  result[name + "_slots"] = [
      [c.numpy().tolist() for c in s.value.values] for s in optimizer.variables
      if s.path.endswith(("_momentum", "_velocity"))]
print(json.dumps(result))
"""


@pytest.mark.processes
def test_every_replica_updates_its_own_copy_alike():
  """Under MirroredStrategy the kernel gets each device's copies of the
  variable and its slots; all copies end equal to Keras's update."""
  result = json.loads(
    run_command([sys.executable, "-c", _REPLICAS_SCRIPT]).stdout.splitlines()[
      -1
    ]
  )
  fused, expected = result["fused"], result["keras"]
  assert len(fused) == 2 and fused[0] == fused[1]
  np.testing.assert_allclose(fused[0], expected[0], **TOLERANCE)
  assert expected[0] != list(range(6))
  assert len(result["fused_slots"]) == 2
  for ours, theirs in zip(result["fused_slots"], result["keras_slots"]):
    assert ours[0] == ours[1]
    np.testing.assert_allclose(ours[0], theirs[0], **TOLERANCE)
