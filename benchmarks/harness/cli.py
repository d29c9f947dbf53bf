"""Flags every benchmark app shares, and how an app hands back its sections.

Each section is an absl app (`python -m benchmarks.speed.throughput --help`)
of one shape: `define_flags(X_lib.Config)` at import and, as `__main__`,
`run_app(X_lib.run, X_lib.Config)`. Run by hand it prints its sections as
Markdown; run by `run_all` it writes them to `--output` as JSON. An app's own
flags are the `settings.flag` fields of its Config (`define_flags`), read
back into one by `config_from_flags`; the flags every app has (--output,
--section, --device, --repeats, --time_budget_secs) are defined here.
"""

from collections.abc import Callable, Mapping
import dataclasses
import os
import sys
import typing

from absl import app
from absl import flags

from benchmarks.harness import markdown
from benchmarks.harness import report as report_lib
from benchmarks.harness import settings
from ctl import teardown
from ctl.errors import USER_ERROR_EXIT_CODE
from ctl.errors import UserError
from ctl.io import storage

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
flags.DEFINE_float(
  "time_budget_secs",
  0,
  "Seconds this app may take (run_all sets it from the section's timeout); "
  "rounds, then steps, are cut to fit it, from the first one's time (see "
  "benchmarks/harness/budget.py). 0: no budget, everything planned runs.",
)

FLAGS = flags.FLAGS
# The flags that `define_flags` defines are the calling app's, not this
# module's (absl attributes a flag to the module that defines it).
flags.disclaim_key_flags()
_DEFINE = {
  bool: flags.DEFINE_bool,
  int: flags.DEFINE_integer,
  float: flags.DEFINE_float,
  str: flags.DEFINE_string,
}


def section_name(default: str) -> str:
  return FLAGS.section or default


def define_flags(config_class: type, *, prefix: str = "") -> None:
  """Defines an absl flag for each `settings.flag` field of a Config.

  The flag is named `prefix + field` (or as the field says), with the
  field's default and help; its kind follows the field's annotation: bool,
  int, float or str, an enum where the field has choices, a list for a
  tuple (`--pipelines=1,2`). Called by an app at import; the flags count as
  the app's own (this module disclaims them), as if it defined them itself.
  """
  kinds = typing.get_type_hints(config_class)
  for field in dataclasses.fields(config_class):
    name = settings.flag_name(field, prefix)
    if name is None:
      continue
    kind, default, metadata = kinds[field.name], field.default, field.metadata
    if "choices" in metadata:
      flags.DEFINE_enum(
        name, default, list(metadata["choices"]), metadata["help"]
      )
    elif typing.get_origin(kind) is tuple:
      flags.DEFINE_list(name, list(map(str, default)), metadata["help"])
    else:
      _DEFINE[kind](name, default, metadata["help"])


def config_from_flags(config_class: type, *, prefix: str = "", **values):
  """The app's Config, each field read from its flag.

  A field takes `values[field]`, else the value of its flag (as named by
  `define_flags` with this prefix), else that of the flag of its own name
  (the flags above, shared by the apps: --repeats, --device,
  --time_budget_secs), else keeps its
  default. A list flag becomes a tuple of the annotation's item type
  (`--pipelines=1,2` gives (1, 2)). `section` takes --section, else its
  default.
  """
  kinds = typing.get_type_hints(config_class)
  for field in dataclasses.fields(config_class):
    if field.name == "section":
      values.setdefault("section", section_name(field.default))
    flag = settings.flag_name(field, prefix) or field.name
    if field.name not in values and flag in FLAGS:
      value = FLAGS[flag].value
      if isinstance(value, list):
        value = tuple(map(typing.get_args(kinds[field.name])[0], value))
      values[field.name] = value
  return config_class(**values)


def run_app(
  run: Callable[..., Mapping],
  config_class: type,
  *,
  prefix: str = "",
  progress: Callable[[Mapping], None] | None = None,
):
  """Every section's entry point: runs `run(config)` as an absl app.

  The flags are parsed, the Config is built from them (`config_from_flags`,
  with the prefix its app defined them under) and the sections `run`
  returns are emitted. With `progress` (`write_progress`,
  `exit_when_final`), `run` is given it as `progress=` and calls it with
  the sections so far. A `UserError` (flags that do not fit together, from
  `check_shared_flags` or the app's own checks) is its one sentence on
  stderr and exit status 2, no traceback.
  """

  def main(argv):
    del argv  # Unused.
    teardown.skip_final_collections()  # Every section runs TensorFlow.
    given = {} if progress is None else {"progress": progress}
    try:
      check_shared_flags()
      sections = run(config_from_flags(config_class, prefix=prefix), **given)
    except UserError as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(USER_ERROR_EXIT_CODE)
    emit(sections)

  app.run(main)


def check_shared_flags() -> None:
  """Refuses the shared flags' bad values before an app measures anything.

  Raises:
    UserError: --repeats below 1, a negative --time_budget_secs, or an
      --output in a directory that is missing or cannot be written (the app
      writes the file there at its end, and makes no directory).
  """
  if FLAGS.repeats < 1:
    raise UserError(f"--repeats must be >= 1, got {FLAGS.repeats}.")
  if FLAGS.time_budget_secs < 0:
    raise UserError(
      "--time_budget_secs must be 0 (no budget) or more, got "
      f"{FLAGS.time_budget_secs:g}."
    )
  if FLAGS.output:
    directory = os.path.dirname(os.path.abspath(FLAGS.output))
    storage.check_writable(directory)
    if not os.path.isdir(directory):
      raise UserError(
        f"--output={FLAGS.output}: no directory {directory} to write it in; "
        "make it or name a file in another."
      )


def write_progress(sections: Mapping[str, Mapping]) -> None:
  """Writes the sections so far to `--output` (run_all keeps them if it
  stops the app at its time limit); run by hand, only the final ones print.
  """
  if FLAGS.output:
    emit(sections)


def exit_when_final(sections: Mapping[str, Mapping]) -> None:
  """As `write_progress`, and exits at once when every section is final.

  Returning from a run frees the traced and compiled models, which took
  TensorFlow 5 to 60 s of CPU after a throughput run of a few seconds here;
  a section's time budget is better spent, so the app exits at once.
  """
  final = all(body["status"] == "ok" for body in sections.values())
  if FLAGS.output or final:
    emit(sections)
  if final:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


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
