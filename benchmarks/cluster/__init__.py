"""Faults between nodes, on a cluster of network namespaces (`make cluster-check`).

Modules (lowest first):
  faults_lib: The six faults a real cluster has (a node lost, partitions, a
    flapping link, the bucket lost by the chief, a stale chief), each run on
    a fresh cluster and compared with an uninterrupted run.
  check: The app: runs them all and writes the fault matrix.
"""
