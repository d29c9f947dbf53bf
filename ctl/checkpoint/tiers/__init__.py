"""The checkpoint tiers: each worker's node, its peers' nodes, the bucket.

Every tier is asked the same (ctl.checkpoint.tiers.tier_restore's `Tier`):
the complete steps it holds and `get(step)`, a prefix to restore from. A
step is saved into the local tier and committed there (`LocalTier.write`,
`adopt`); the bucket gets a committed step's copy through the one fenced
commit of its state file (`bucket_tier.copy_to_bucket`); a node agent
serves its node's tier to peers and persists its dead worker's newest step
(`peer_tier`). docs/design.md, "Checkpoint tiers".

Modules (lowest first):
  local_tier: The local checkpoint tier: each worker's newest saves on its
    own node.
  node_tiers: A node's local tiers: where they live, whose they are, how an
    agent finds them.
  bucket_tier: The bucket tier: the checkpoint directory behind every node's
    local tier.
  peer_tier: The peer tier: a node's local tier served to the other nodes,
    and fetched from them.
  tier_restore: Restore from the nearest tier, every worker at one step.
  checkpoint_tiers: Checkpoints in tiers: every worker's local tier, its
    peers', the bucket behind them.
"""
