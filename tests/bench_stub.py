"""A stand-in benchmark app for run_all's tests, run as run_all runs one
(`python -m tests.bench_stub --output=F --section=S ...`), without
TensorFlow: it waits for the file `--wait_for` names (if any), then
`--sleep` seconds (if any), creates the file `--touch` names (if any), and
writes one section whose note says what `--saw` held."""

import os
import sys
import time

from benchmarks.harness import report as report_lib


def main(argv: list[str]) -> None:
  flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
  while "wait_for" in flags and not os.path.exists(flags["wait_for"]):
    time.sleep(0.05)  # run_all's timeout ends a wait that never ends.
  time.sleep(float(flags.get("sleep", 0)))  # A section's measured time.
  if "touch" in flags:
    open(flags["touch"], "w").close()
  report_lib.write_sections(
    flags["output"],
    {
      flags["section"]: report_lib.section(
        title=flags["section"], notes=[f"saw: {flags.get('saw', '')}"]
      )
    },
  )


if __name__ == "__main__":
  main(sys.argv[1:])
