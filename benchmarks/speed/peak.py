"""App: the device's dense matmul rate (see `peak_lib`).

python -m benchmarks.speed.peak                    # prints a Markdown table
python -m benchmarks.speed.peak --device=gpu --matmul_size=8192
"""

from absl import app

from benchmarks.harness import cli
from benchmarks.speed import peak_lib

cli.define_flags(peak_lib.Config)


def main(argv):
  del argv  # Unused.
  sections = peak_lib.run(cli.config_from_flags(peak_lib.Config))
  cli.emit({cli.section_name("peak"): sections["peak"]})


if __name__ == "__main__":
  app.run(main)
