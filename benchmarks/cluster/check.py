"""App: the fault matrix between nodes (`make cluster-check`).

python -m benchmarks.cluster.check --results_dir=cluster_results
python -m benchmarks.cluster.check --only=node_lost,link_flap

Runs an uninterrupted job, then each fault of `faults_lib.FAULTS` on a fresh
cluster of network namespaces, and writes `<results_dir>/latest/results.json`
(`faults`: one object a fault) and `results.md`, with each node's log of a
fault that did not hold under `logs/`; exits 1 when a fault did not hold,
2 where namespaces cannot be made (one sentence says why).
"""

import dataclasses
import glob
import json
import os
import shutil
import sys
import tempfile
import time

from benchmarks.cluster import faults_lib
from ctl import errors
from ctl.testing import netns_cluster


def main(argv=None) -> int:
  parser = errors.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
  parser.add_argument("--results_dir", default="cluster_results")
  parser.add_argument("--only", default="", help="comma-separated fault names")
  parser.add_argument("--train_steps", type=int, default=300)
  args = parser.parse_args(argv)
  names = [n for n in args.only.split(",") if n] or list(faults_lib.FAULTS)
  unknown = sorted(set(names) - set(faults_lib.FAULTS))
  if unknown:
    parser.error(
      f"unknown faults {unknown}; choose from {list(faults_lib.FAULTS)}"
    )
  try:
    netns_cluster.check_available()
  except netns_cluster.Unavailable as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  latest = os.path.join(args.results_dir, "latest")
  shutil.rmtree(latest, ignore_errors=True)
  os.makedirs(latest)
  work = tempfile.mkdtemp(prefix="ctl-cluster-check-")
  started = time.monotonic()
  try:
    reference = _run("none", work, args.train_steps, None, latest)
    results = [
      _run(name, work, args.train_steps, reference.fingerprint, latest)
      for name in names
    ]
  finally:
    shutil.rmtree(work, ignore_errors=True)
  _write(latest, reference, results, time.monotonic() - started)
  held = all(r.passed for r in [reference, *results])
  print(f"cluster-check: {'PASS' if held else 'FAIL'}; {latest}/results.md")
  return 0 if held else 1


def _run(name, work, steps, reference, latest) -> faults_lib.Result:
  workdir = os.path.join(work, name)
  result = faults_lib.run_fault(
    name, workdir=workdir, steps=steps, reference=reference
  )
  print(_row(result), flush=True)
  if not result.passed:
    logs = os.path.join(latest, "logs", name)
    os.makedirs(logs)
    for path in glob.glob(os.path.join(workdir, "*.log")):
      shutil.copy(path, logs)
  return result


_COLUMNS = (
  "name", "passed", "outcome", "detected_secs", "steps_lost",
  "same_fingerprint", "named_in_ledger", "exit_codes", "seconds",
)  # fmt: skip


def _row(result: faults_lib.Result) -> str:
  values = dataclasses.asdict(result)
  return "| " + " | ".join(str(values[c]) for c in _COLUMNS) + " |"


def _write(latest, reference, results, seconds) -> None:
  document = {
    "stall_limit_secs": faults_lib.STALL_SECS,
    "detect_bound_secs": faults_lib.STALL_SECS + 15,
    "seconds": round(seconds, 1),
    "reference": dataclasses.asdict(reference),
    "faults": [dataclasses.asdict(r) for r in results],
  }
  with open(os.path.join(latest, "results.json"), "w", encoding="utf-8") as f:
    json.dump(document, f, indent=2)
  lines = [
    f"# Faults between nodes ({seconds:.0f} s; stall limit "
    f"{faults_lib.STALL_SECS} s, detection bound {faults_lib.STALL_SECS + 15} s)",
    "",
    "| " + " | ".join(_COLUMNS) + " |",
    "|" + "---|" * len(_COLUMNS),
    *(_row(r) for r in results),
    "",
    f"Reference (uninterrupted): {reference.fingerprint}",
  ]
  with open(os.path.join(latest, "results.md"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
  sys.exit(main())
