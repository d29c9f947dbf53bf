"""App: the device's dense matmul rate (see `peak_lib`).

python -m benchmarks.speed.peak                    # prints a Markdown table
python -m benchmarks.speed.peak --device=gpu --matmul_size=8192
"""

from benchmarks.harness import cli
from benchmarks.speed import peak_lib

cli.define_flags(peak_lib.Config)

if __name__ == "__main__":
  cli.run_app(peak_lib.run, peak_lib.Config)
