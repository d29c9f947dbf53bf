"""Where a run's files live and how they get there: local disk, the Cloud
Storage FUSE mount or gs://; staging, mirroring, retries.

Modules (lowest first):
  retry: Retries a call that failed transiently, with exponential backoff.
  processes: Which process a pid names on this host, across pid reuse and
    containers.
  tempdirs: Private local directories: the staging root and per-process
    scratch dirs.
  checkpoint_state: The checkpoint state file as text: its one parser and
    writer.
  fencing: The fence every commit point checks: this process still holds the
    lease.
  mirror: Keeps a local staging directory and a remote directory in step.
  storage: Where a job's files live: a local directory, a FUSE mount, or
    gs://.
  outputs: Where a run writes checkpoints, TensorBoard logs and the
    SavedModel.
"""
