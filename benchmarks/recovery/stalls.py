"""App: stall detection latency and the watchdog's cost (see `stalls_lib`).

python -m benchmarks.recovery.stalls --repeats=2
python -m benchmarks.recovery.stalls --repeats=1 --stall_timeout_secs=5
"""

from benchmarks.harness import cli
from benchmarks.recovery import stalls_lib

cli.define_flags(stalls_lib.Config)

if __name__ == "__main__":
  cli.run_app(stalls_lib.run, stalls_lib.Config)
