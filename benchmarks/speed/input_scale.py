"""App: records read per worker and resume cost (see `input_scale_lib`).

python -m benchmarks.speed.input_scale --num_records=50000
python -m benchmarks.speed.input_scale --num_records=2000 --repeats=1   # quick
"""

from benchmarks.harness import cli
from benchmarks.speed import input_scale_lib

cli.define_flags(input_scale_lib.Config)

if __name__ == "__main__":
  cli.run_app(input_scale_lib.run, input_scale_lib.Config)
