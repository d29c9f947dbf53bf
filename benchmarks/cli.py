"""Flags every benchmark app shares, and how an app hands back its sections.

Each benchmark is an absl app (`python -m benchmarks.throughput --help`). Run
by hand it prints its sections as Markdown; run by `run_all` it writes them to
`--output` as JSON. Flags used by several apps are defined once here so that
the apps can also be imported side by side (as the tests do).
"""

from collections.abc import Mapping
import os
import sys

from absl import flags

from benchmarks import markdown
from benchmarks import report as report_lib

flags.DEFINE_string(
  "output",
  "",
  "Write this app's {section: body} JSON here "
  "(run_all sets it); empty prints Markdown to stdout.",
)
flags.DEFINE_string(
  "section",
  "",
  "Name of the section this app writes; empty uses the app's default.",
)
flags.DEFINE_enum(
  "device",
  "auto",
  ["auto", "cpu", "gpu"],
  "Where to run: auto picks the first GPU if one is visible, else the CPU.",
)
flags.DEFINE_integer(
  "repeats",
  3,
  "Measured rounds; the report gives the median and the min-max range.",
)

FLAGS = flags.FLAGS


def section_name(default: str) -> str:
  return FLAGS.section or default


def emit(sections: Mapping[str, Mapping]) -> None:
  """Writes the sections to `--output`, or prints them as Markdown.

  Writing is atomic (a temporary file, then a rename), so `run_all` never
  reads half a file from an app it stopped at its time limit; an app may
  emit several times (progress), the last write wins.
  """
  if FLAGS.output:
    temporary = f"{FLAGS.output}.tmp"
    report_lib.write_sections(temporary, sections)
    os.replace(temporary, FLAGS.output)
    return
  report = report_lib.merge(report_lib.new_report({}), sections)
  sys.stdout.write(markdown.render(report))
