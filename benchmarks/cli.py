"""Flags every benchmark app shares, and how an app hands back its sections.

Each benchmark is an absl app (`python -m benchmarks.throughput --help`). Run
by hand it prints its sections as Markdown; run by `run_all` it writes them to
`--output` as JSON. Flags used by several apps are defined once here so that
the apps can also be imported side by side (as the tests do).
"""

from collections.abc import Callable, Mapping
import dataclasses
import os
import sys
from typing import Any

from absl import app
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


def config_from_flags(
  config_class: type,
  *,
  prefix: str = "",
  renames: Mapping[str, str] | None = None,
  **values,
):
  """The app's Config, each field read from the flag of its name.

  The fields of a benchmark's Config mirror its app's flags, so the app
  builds it here instead of spelling out every `field=FLAGS.field`. A field
  takes, in this order: `values[field]`; the flag `renames[field]`; the flag
  `prefix + field`, else the flag `field`. A list flag becomes a tuple of the
  type of the default's items (`--pipelines=1,2` gives (1, 2)). `section`
  takes --section, else its default; a field with no flag keeps its default.
  """
  renames = renames or {}
  for field in dataclasses.fields(config_class):
    if field.name == "section":
      values.setdefault("section", section_name(field.default))
    candidates = (renames.get(field.name), prefix + field.name, field.name)
    flag = next((name for name in candidates if name and name in FLAGS), None)
    if field.name not in values and flag:
      value = FLAGS[flag].value
      if isinstance(value, list):
        item = type(field.default[0]) if field.default else str
        value = tuple(map(item, value))
      values[field.name] = value
  return config_class(**values)


def run_app(run: Callable[[Any], Mapping], config_class: type, **config_args):
  """Runs an app whose `run(config)` returns its sections, as an absl app.

  The flags are parsed, the Config is built from them (`config_args` as in
  `config_from_flags`) and the sections are emitted.
  """
  app.run(
    lambda argv: emit(run(config_from_flags(config_class, **config_args)))
  )


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
