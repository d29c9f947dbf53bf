"""A strategy name and the cluster -> a `tf.distribute.Strategy`."""

import signal
import threading

import tensorflow as tf

from ctl.distributed import cluster as cluster_lib
from ctl.errors import UserError

STRATEGY_NAMES = ("auto", "one_device", "mirrored", "multi_worker")
COLLECTIVE_NAMES = ("auto", "ring", "nccl")

_IMPLEMENTATIONS = {
  "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
  "ring": tf.distribute.experimental.CommunicationImplementation.RING,
  "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
}
# MirroredStrategy has no ring all-reduce; "ring" there means "without NCCL".
_CROSS_DEVICE_OPS = {
  "auto": lambda: None,  # TensorFlow's choice: NCCL when it can.
  "ring": tf.distribute.ReductionToOneDevice,
  "nccl": tf.distribute.NcclAllReduce,
}


def make_strategy(
  *,
  name: str,
  cluster: cluster_lib.ClusterInfo,
  collective: str = "auto",
) -> tf.distribute.Strategy:
  """Builds the distribution strategy for this process.

  Call it once, at program start: MultiWorkerMirroredStrategy must be built
  before TensorFlow runs any op, and building it sets `TF_CONFIG` (see
  `cluster.install_tf_config`).

  Args:
    name: "auto" picks "multi_worker" when this process trains with other
      workers, else "mirrored" when more than one GPU is visible, else
      "one_device". "one_device" uses GPU:0, or CPU:0 without a GPU.
      "mirrored" uses every local GPU, or every logical CPU without a GPU.
      "multi_worker" is MultiWorkerMirroredStrategy over `cluster`.
    cluster: The role of this process, from `cluster.resolve()`.
    collective: All-reduce implementation: "auto" (TensorFlow's choice),
      "ring" (no NCCL) or "nccl" (GPUs only). Ignored by "one_device".

  Returns:
    The strategy.

  Raises:
    UserError: If `name` or `collective` is unknown, if a one-machine strategy
      is asked for in a multi-worker cluster, or if "nccl" is asked for
      without a GPU.
  """
  # Visible devices can be listed without starting the TensorFlow runtime,
  # which MultiWorkerMirroredStrategy needs to configure first.
  num_gpus = len(tf.config.get_visible_devices("GPU"))
  name = _checked_name(name, cluster, collective, num_gpus=num_gpus)
  if name == "one_device":
    return tf.distribute.OneDeviceStrategy("/gpu:0" if num_gpus else "/cpu:0")
  if name == "mirrored":
    devices = tf.config.list_logical_devices(
      "GPU"
    ) or tf.config.list_logical_devices("CPU")
    return tf.distribute.MirroredStrategy(
      devices=[d.name for d in devices],
      cross_device_ops=_CROSS_DEVICE_OPS[collective](),
    )
  cluster_lib.install_tf_config(cluster)
  strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(
      implementation=_IMPLEMENTATIONS[collective]
    )
  )
  # TensorFlow's coordination service installs a C++ SIGTERM handler that
  # only records the signal: until the train loop's own handler takes over
  # (ctl.resilience.preemption), SIGTERM must end a worker that is still starting.
  if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
  return strategy


def _checked_name(
  name: str, cluster: cluster_lib.ClusterInfo, collective: str, *, num_gpus
) -> str:
  """The strategy `name` resolves to ("auto" chosen), checked (UserError)."""
  if name not in STRATEGY_NAMES:
    raise UserError(
      f"strategy {name!r} is not one of {', '.join(STRATEGY_NAMES)}."
    )
  if collective not in COLLECTIVE_NAMES:
    raise UserError(
      f"collective {collective!r} is not one of {', '.join(COLLECTIVE_NAMES)}."
    )
  if name == "auto":
    if cluster.is_multi_worker:
      name = "multi_worker"
    else:
      name = "mirrored" if num_gpus > 1 else "one_device"
  if cluster.is_multi_worker and name != "multi_worker":
    raise UserError(
      f"strategy {name!r} trains on one machine, but this process is one of"
      f" {cluster.num_workers} workers in TF_CONFIG; use 'multi_worker' or"
      " 'auto'."
    )
  if collective == "nccl" and name != "one_device" and not num_gpus:
    raise UserError(
      "collective 'nccl' needs a GPU, but none is visible; use"
      " 'auto' or 'ring'."
    )
  return name


def describe(strategy: tf.distribute.Strategy) -> str:
  """Returns a one-line summary of `strategy` for logs.

  Args:
    strategy: Any strategy.

  Returns:
    The strategy's class, its number of replicas in sync (the factor between
    the per-replica and the global batch size) and this worker's devices.
  """
  devices = ", ".join(strategy.extended.worker_devices)
  return (
    f"{type(strategy).__name__}: {strategy.num_replicas_in_sync}"
    f" replica(s) in sync; local devices: {devices}"
  )
