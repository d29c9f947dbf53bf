"""App: goodput under faults, ctl vs Keras BackupAndRestore (`goodput_lib`).

python -m benchmarks.recovery.goodput --kills=2 --epochs=4
"""

from benchmarks.harness import cli
from benchmarks.recovery import goodput_lib

cli.define_flags(goodput_lib.Config)

if __name__ == "__main__":
  cli.run_app(goodput_lib.run, goodput_lib.Config)
