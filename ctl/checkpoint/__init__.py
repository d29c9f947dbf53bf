"""Checkpoints and the run's final outputs: what they hold, when they are
saved, restore, export, finishing.

Modules (lowest first):
  serving: The SavedModel's serving signature, as a task says it (no
    TensorFlow on import).
  checkpointing: Checkpoints: what they hold, how they are saved, and which
    one is restored.
  tiers: The checkpoint tiers (a folder): each worker's node, its peers'
    nodes, the bucket.
  save_policy: When the controller saves a checkpoint: every N steps, every S
    seconds
  run_checkpoints: The controller's checkpoint duty: restore at start-up, save
    when due.
  export: The SavedModel export: whole or not at all, with the task's
    serving signature.
  finishing: The finishing steps of a run after its last train loop: export,
    summary.
"""
