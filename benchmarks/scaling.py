"""App: the trainer on 1 vs 2 local workers (see `scaling_lib`).

  python -m benchmarks.scaling --repeats=3
  python -m benchmarks.scaling --model=resnet50 --image_size=224 \
      --per_replica_batch_size=16 --train_steps=20 --steps_per_loop=5
"""

from absl import flags

from benchmarks import cli
from benchmarks import scaling_lib

flags.DEFINE_enum(
  "model", "small_cnn", ["resnet50", "small_cnn"], "Trainer --model."
)
flags.DEFINE_integer("image_size", 32, "Trainer --image_size.")
flags.DEFINE_integer(
  "per_replica_batch_size",
  32,
  "Trainer --per_replica_batch_size (the same for every count).",
)
flags.DEFINE_integer("train_steps", 200, "Trainer --train_steps.")
flags.DEFINE_integer(
  "steps_per_loop",
  20,
  "Trainer --steps_per_loop and "
  "--log_every_steps (one throughput window each).",
)
flags.DEFINE_list(
  "worker_counts",
  ["1", "2"],
  "Worker counts to compare; the first is the baseline.",
)
flags.DEFINE_bool(
  "workers_on_cpu",
  True,
  "Hide GPUs from the workers, so "
  "they do not fight over one GPU on a one-GPU machine.",
)
flags.DEFINE_integer("run_timeout_secs", 300, "Limit for one trainer run.")


if __name__ == "__main__":
  cli.run_app(
    scaling_lib.run,
    scaling_lib.Config,
    renames=dict(batch_size="per_replica_batch_size", steps="train_steps"),
  )
