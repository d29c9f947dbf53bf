"""App: the device's dense matmul rate (see `peak_lib`).

python -m benchmarks.peak                    # prints a Markdown table
python -m benchmarks.peak --device=gpu --matmul_size=8192
"""

from absl import app
from absl import flags

from benchmarks import cli
from benchmarks import peak_lib

flags.DEFINE_integer(
  "matmul_size",
  0,
  "Side of the square matrices; 0 picks 2048 on a CPU and 8192 on a GPU.",
)
flags.DEFINE_integer(
  "matmul_chain",
  0,
  "Products per timed call; 0 picks 4 on a CPU and 50 on a GPU.",
)


def main(argv):
  del argv  # Unused.
  sections = peak_lib.run(
    cli.config_from_flags(
      peak_lib.Config, renames=dict(size="matmul_size", chain="matmul_chain")
    )
  )
  cli.emit({cli.section_name("peak"): sections["peak"]})


if __name__ == "__main__":
  app.run(main)
