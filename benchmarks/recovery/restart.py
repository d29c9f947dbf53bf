"""App: a worker's SIGKILL to the first resumed step (see `restart_lib`).

python -m benchmarks.recovery.restart --repeats=3
python -m benchmarks.recovery.restart --repeats=1 --kill_step=10
python -m benchmarks.recovery.restart --repeats=1 --model=resnet50 --section=restart_resnet50
"""

from absl import app

from benchmarks.harness import cli
from benchmarks.recovery import restart_lib

cli.define_flags(restart_lib.Config)


def main(argv):
  del argv  # Unused.
  config = cli.config_from_flags(restart_lib.Config)
  cli.emit(restart_lib.run(config, on_round=cli.emit))


if __name__ == "__main__":
  app.run(main)
