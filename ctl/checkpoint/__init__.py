"""Checkpoints and the run's final outputs: what they hold, when they are
saved, restore, export, finishing.

Modules (lowest first):
  checkpointing: Checkpoints: what they hold, how they are saved, and which
    one is restored.
  tiers: The checkpoint tiers (a folder): each worker's node, its peers'
    nodes, the bucket.
  save_policy: When the controller saves a checkpoint: every N steps, every S
    seconds
  run_checkpoints: The controller's checkpoint duty: restore at start-up, save
    when due.
  export: SavedModel export with a serving signature that takes a batch of
    images.
  finishing: The finishing steps of a run after its last train loop: export,
    summary.
"""
