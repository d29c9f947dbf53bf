"""Helpers for tests and benchmarks of programs built on ctl.

Nothing in `ctl` imports this package, and it imports neither pytest nor
TensorFlow at module level, so `tests/` and `benchmarks/` can share it (the
benchmarks must not import `tests/`). What is specific to the reference
trainer (its command line, environment and flags) is in `trainer/testing.py`.

  gcs_emulator  a real Cloud Storage server (gcp-storage-emulator), a process
  run_files     what a run wrote: train_summary.json, TensorBoard scalars
"""
