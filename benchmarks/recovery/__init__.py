"""The sections that measure faults and recovery: saves, restarts, goodput.

Each section is an app `X` (its flags; `python -m benchmarks.recovery.X`)
and its `X_lib` (its Config and `run`); run_all runs each in its own
process. Imports benchmarks.harness and benchmarks.workloads only
(docs/design.md, "Layers"). Its modules, lowest first:

  checkpointing_lib: save and restore time, and what saving costs training.
  checkpointing: its app (section checkpointing).
  restart_lib: seconds from a worker's SIGKILL to the first resumed step.
  restart: its app (sections restart, restart_resnet50).
  goodput_model_lib: the goodput model against killed runs.
  tiers_lib: checkpoint tiers, how long a save blocks and a restore takes.
  tiers: its app (sections checkpoint_tiers, checkpoint_tiers_resnet50).
  goodput_lib: goodput under faults, our engine vs Keras BackupAndRestore.
  goodput: its app (section goodput).
  stalls_lib: how fast a stall is detected and recovered, what watching costs.
  stalls: its app (section stalls).
"""
