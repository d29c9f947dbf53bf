"""Helpers for tests and benchmarks of programs built on ctl.

Nothing in `ctl` imports this package, and it imports neither pytest nor
TensorFlow at module level, so `tests/` and `benchmarks/` can share it (the
benchmarks must not import `tests/`). What is specific to the reference
trainer (its command line, environment and flags) is in `trainer/testing.py`.

Modules:
  clock: A wall clock a test can step, for whole process trees (an
    LD_PRELOAD library, `clock_jump.c`).
  events: Following a run through its progress events (`CTL_EVENTS`), not
    its logs.
  gcs_emulator: A real Cloud Storage server (gcp-storage-emulator), a
    process.
  netns_cluster: A cluster in a box: nodes as network namespaces with their
    own addresses, host names and disks; cuts, flaps and lost nodes.
  run_files: What a run wrote: train_summary.json, TensorBoard scalars.
"""
