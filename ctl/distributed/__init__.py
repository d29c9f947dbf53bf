"""Who is in the cluster and how its workers meet: the cluster the platform
describes (ctl.platform), strategies, waiting for peers.

Modules (lowest first):
  ports: Free ports for a local cluster's workers and an emulator, that stay
    free.
  cluster: Who am I in the cluster: the platform's TF_CONFIG as a value
    object.
  strategies: A strategy name and the cluster -> a `tf.distribute.Strategy`.
  peers: Waiting for the cluster's other workers, in Python, before TensorFlow
    does.
  peer_loss: Naming the peer a worker lost (a node gone or cut off) from
    TensorFlow's coordination-service error: one sentence, not a traceback.
  worker_exchange: A small exchange among the workers: every worker's row, to
    every worker.
  environment: What the platform says this process is: one call for a
    multi-worker run.
"""
