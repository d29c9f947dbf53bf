"""App: stall detection latency and the watchdog's cost (see `stalls_lib`).

python -m benchmarks.stalls --repeats=2
python -m benchmarks.stalls --repeats=1 --stall_timeout_secs=5
"""

from absl import flags

from benchmarks import cli
from benchmarks import stalls_lib

flags.DEFINE_float(
  "stall_timeout_secs",
  10,
  "Trainer --stall_timeout_secs in the detection runs.",
)
flags.DEFINE_integer("stall_step", 20, "The step the stall is injected at.")
flags.DEFINE_integer(
  "train_steps", 40, "Trainer --train_steps of a detection run."
)
flags.DEFINE_integer(
  "cost_train_steps",
  600,
  "Trainer --train_steps of a cost run (steps_per_loop=1).",
)
flags.DEFINE_integer("run_timeout_secs", 300, "Limit for one trainer run.")


if __name__ == "__main__":
  cli.run_app(stalls_lib.run, stalls_lib.Config)
