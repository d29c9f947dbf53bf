"""Small exchanges among the workers: every worker's row, to every worker;
whether a flag is set on any worker.

Before a restore the workers must agree on what each of them holds (ctl.
tier_restore). One all-reduce does it: each worker writes its row into its
own slot of a table of zeros, and the SUM over all replicas is the whole
table on every worker. Each local replica adds its share of the row, so a
worker with several devices counts once. Like every collective it is
bounded by the coordination service: a worker that is gone fails it.
"""

from collections.abc import Callable

import numpy as np
import tensorflow as tf


def worker_index(strategy: tf.distribute.Strategy) -> int:
  """This worker's index in the cluster: the chief 0, then the workers."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.task_type:
    return 0
  if resolver.task_type == "chief":
    return 0
  return resolver.task_id + int("chief" in resolver.cluster_spec().jobs)


def local_replicas(strategy: tf.distribute.Strategy) -> int:
  """The replicas of this worker (its devices in the strategy)."""
  try:
    return len(strategy.extended.worker_devices)
  except RuntimeError:  # The default strategy: one replica in all.
    return strategy.num_replicas_in_sync


def num_workers(strategy: tf.distribute.Strategy) -> int:
  """The workers that take part in the strategy's collectives."""
  return strategy.num_replicas_in_sync // local_replicas(strategy)


def gather_rows(strategy: tf.distribute.Strategy, row) -> np.ndarray:
  """Every worker's `row` (numbers), as a (workers, len(row)) table.

  Every worker must call it at the same point, with rows of one length.
  Values are whole numbers (float64 on the wire: exact up to 2**53).
  """
  workers = num_workers(strategy)
  if workers == 1:
    return np.asarray([row], dtype=np.float64)
  table = np.zeros((workers, len(row)), dtype=np.float64)
  table[worker_index(strategy)] = row
  share = tf.constant(table / local_replicas(strategy))

  @tf.function(autograph=False)  # Nothing to convert.
  def all_reduce():
    return strategy.reduce(
      "SUM", strategy.run(lambda: tf.identity(share)), axis=None
    )

  return np.rint(all_reduce().numpy())  # Shares of a whole number.


def any_worker(strategy: tf.distribute.Strategy) -> Callable[[bool], bool]:
  """`agree(flag)`: whether `flag` is true on any worker, one all-reduce of
  one number a call (traced once, so a call costs the collective alone).

  Every worker must call it at the same points. With one worker it is the
  flag itself, and nothing is traced.
  """
  if num_workers(strategy) == 1:
    return bool
  share = 1.0 / local_replicas(strategy)

  @tf.function(autograph=False)  # Nothing to convert.
  def all_reduce(flag):
    return strategy.reduce("SUM", strategy.run(lambda: flag * share), axis=None)

  return lambda flag: bool(all_reduce(tf.constant(float(flag))) > 0.5)


def worker_hosts(strategy: tf.distribute.Strategy) -> list[str]:
  """Every worker's host, by index (the chief first); ["localhost"] alone."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.task_type:
    return ["localhost"]
  jobs = resolver.cluster_spec().as_dict()
  addresses = [*jobs.get("chief", []), *jobs.get("worker", [])]
  return [address.rsplit(":", 1)[0] for address in addresses]
