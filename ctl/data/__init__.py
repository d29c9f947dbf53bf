"""Input: deterministic, resumable pipelines and the files they read.

Modules (lowest first):
  input: Deterministic, resumable input pipelines whose cost is each worker's
    share.
  datafiles: Training files on local disk, a Cloud Storage FUSE mount, or
    gs://.
"""
