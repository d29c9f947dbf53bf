"""What a local-tier save costs the training around it, not only the call.

A tiered save (ctl.checkpoint.tiers.checkpoint_tiers) returns once the variables
are snapshotted on the host; the optimizer's next update then copies the
buffers it shares with that snapshot, and the write of the files runs on a
thread. On an accelerator that thread has host cores to itself; on a CPU it
takes them from the training. So the goodput model's save seconds for the
tiers are measured in training: the same train loops timed without and with
a local save after each, in alternating blocks (one process, the trainer's
model and optimizer, synthetic in-memory batches), and the difference per
save is the cost.
"""

import statistics
import tempfile
import time

import tensorflow as tf

from benchmarks.workloads import runners
from ctl.checkpoint import checkpointing
from ctl.checkpoint.tiers import checkpoint_tiers
from ctl.checkpoint.tiers import local_tier

_STEPS_PER_LOOP = 5
_BATCH = 8


def seconds_per_save(
  *, model: str, image_size: int, root: str, blocks: int = 2, loops: int = 5
) -> dict:
  """{"in_training": extra seconds per save, "step": seconds per step}.

  Args:
    model: the trainer's model.
    image_size: input side (the checkpoint's size does not depend on it).
    root: where the local tier is made (the section's).
    blocks: pairs of blocks, without and with saves.
    loops: train loops per block (a save after each in a saving block).
  """
  runner, group = _runner(model, image_size)
  checkpoint = tf.train.Checkpoint(model=group.model, optimizer=group.optimizer)
  with tempfile.TemporaryDirectory(prefix="bench-save-cost-", dir=root) as tier:
    tiered = checkpoint_tiers.TieredCheckpointer(
      bucket=checkpointing.Checkpointer(
        checkpoint=checkpoint, directory=tier + "-bucket", is_chief=True, keep=1
      ),
      tier=local_tier.LocalTier(tier),
      keep=1,
      is_chief=True,
      on_saved=lambda: None,
      agreement=None,
    )
    step = 0

    def block(save: bool) -> float:
      nonlocal step
      start = time.perf_counter()
      for _ in range(loops):
        runner.run(_STEPS_PER_LOOP)
        step += _STEPS_PER_LOOP
        if save:
          tiered.save(step, to_bucket=False)
      tiered.sync()
      return time.perf_counter() - start

    block(save=True)  # Traces the loop; sets up the host copy.
    plain, saving = [], []
    for _ in range(blocks):
      plain.append(block(save=False))
      saving.append(block(save=True))
    tiered.close()
  return {
    "in_training": max(
      0.0, (statistics.median(saving) - statistics.median(plain)) / loops
    ),
    "step": statistics.median(plain) / (loops * _STEPS_PER_LOOP),
  }


def _runner(model: str, image_size: int):
  """The engine's runner over synthetic in-memory batches, and its model
  group (the trainer's model and optimizer), under the default strategy."""
  strategy = tf.distribute.get_strategy()
  dataset, num_classes = runners.synthetic_batch(
    image_size=image_size, batch_size=_BATCH
  )
  group = runners.build_group(
    strategy=strategy,
    model_name=model,
    image_size=image_size,
    num_classes=num_classes,
    precision="none",
  )
  loop = runners.train_loop(
    strategy=strategy,
    group=group,
    global_batch_size=_BATCH,
    steps_per_loop=_STEPS_PER_LOOP,
    xla=False,
  )
  runner = runners.EngineRunner(
    strategy=strategy,
    loop=loop,
    dataset=dataset,
    steps_per_loop=_STEPS_PER_LOOP,
  )
  return runner, group
