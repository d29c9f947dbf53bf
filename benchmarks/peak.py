"""App: the device's dense matmul rate (see `peak_lib`).

python -m benchmarks.peak                    # prints a Markdown table
python -m benchmarks.peak --device=gpu --matmul_size=8192
"""

from absl import app

from benchmarks import cli
from benchmarks import peak_lib

cli.define_flags(peak_lib.Config)


def main(argv):
  del argv  # Unused.
  sections = peak_lib.run(cli.config_from_flags(peak_lib.Config))
  cli.emit({cli.section_name("peak"): sections["peak"]})


if __name__ == "__main__":
  app.run(main)
