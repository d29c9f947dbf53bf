"""App: a worker's SIGKILL to the first resumed step (see `restart_lib`).

python -m benchmarks.recovery.restart --repeats=3
python -m benchmarks.recovery.restart --repeats=1 --kill_step=10
python -m benchmarks.recovery.restart --repeats=1 --model=resnet50 --section=restart_resnet50
"""

from benchmarks.harness import cli
from benchmarks.recovery import restart_lib

cli.define_flags(restart_lib.Config)

if __name__ == "__main__":
  cli.run_app(restart_lib.run, restart_lib.Config, progress=cli.write_progress)
