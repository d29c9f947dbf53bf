"""App: a worker's SIGKILL to the first resumed step (see `restart_lib`).

python -m benchmarks.restart --repeats=3
python -m benchmarks.restart --repeats=1 --kill_step=10
"""

from absl import app
from absl import flags

from benchmarks import cli
from benchmarks import restart_lib

flags.DEFINE_integer("kill_step", 20, "Worker 1 is killed at this step.")
flags.DEFINE_integer("run_timeout_secs", 300, "Limit for one wait in a run.")

FLAGS = flags.FLAGS


def main(argv):
  del argv  # Unused.
  config = restart_lib.Config(
    kill_step=FLAGS.kill_step,
    repeats=FLAGS.repeats,
    run_timeout_secs=FLAGS.run_timeout_secs,
    section=cli.section_name("restart"),
  )
  cli.emit(restart_lib.run(config, on_round=cli.emit))


if __name__ == "__main__":
  app.run(main)
