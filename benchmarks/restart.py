"""App: a worker's SIGKILL to the first resumed step (see `restart_lib`).

python -m benchmarks.restart --repeats=3
python -m benchmarks.restart --repeats=1 --kill_step=10
python -m benchmarks.restart --repeats=1 --model=resnet50 --section=restart_resnet50
"""

from absl import app
from absl import flags

from benchmarks import cli
from benchmarks import restart_lib

flags.DEFINE_integer("kill_step", 20, "Worker 1 is killed at this step.")
flags.DEFINE_integer("run_timeout_secs", 300, "Limit for one wait in a run.")
flags.DEFINE_enum(
  "model",
  "small_cnn",
  ["small_cnn", "resnet50"],
  "The trainer's model (resnet50: synthetic images, a long cold start).",
)

FLAGS = flags.FLAGS


def main(argv):
  del argv  # Unused.
  config = cli.config_from_flags(restart_lib.Config)
  cli.emit(restart_lib.run(config, on_round=cli.emit))


if __name__ == "__main__":
  app.run(main)
