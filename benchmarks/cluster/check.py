"""App: the fault matrix between nodes (`make cluster-check`).

python -m benchmarks.cluster.check --results_dir=cluster_results
python -m benchmarks.cluster.check --only=node_lost,link_flap --parallel=1

Runs each fault of `faults_lib.FAULTS` and an uninterrupted job of the same
flags (the reference), each on a fresh cluster of network namespaces, and
judges each fault against the reference's weights. `--parallel` of them run
at once, each in a runner process of its own (its own namespaces,
addresses and emulator: clusters never share a link or a port); a fault spends most of its
time waiting out a partition, a flap or a restart, so two at a time keep both
cores busy where one leaves them half idle. Writes
`<results_dir>/latest/results.json` (`faults`: one object a fault) and
`results.md`, with each node's log of a fault that did not hold under
`logs/`; exits 1 when a fault did not hold, 2 where namespaces cannot be
made or on bad input (one sentence says why).
"""

from concurrent import futures
import dataclasses
import glob
import json
import multiprocessing
import os
import shutil
import sys
import time

from benchmarks.cluster import faults_lib
from ctl import errors
from ctl.io import storage
from ctl.io import tempdirs
from ctl.launch import reaper
from ctl.testing import netns_cluster
from trainer import testing

REFERENCE = "none"  # The uninterrupted run's name in the results.
# The check's work directory (each node's disk, the bucket's data, the logs)
# under the system's temporary directory: `tempdirs.scratch_dir` names it by
# this process's pid, so one left by a SIGKILLed check (its `finally` never
# ran) is removed when the next check starts.
WORK_PREFIX = "ctl_cluster_check_"


def main(argv=None) -> int:
  parser = errors.ArgumentParser(
    prog="python -m benchmarks.cluster.check",
    description=__doc__.split("\n\n", 1)[0],
  )
  parser.add_argument("--results_dir", default="cluster_results")
  parser.add_argument("--only", default="", help="comma-separated fault names")
  parser.add_argument(
    "--train_steps",
    type=int,
    default=300,
    help=f"each job's steps (at least {faults_lib.MIN_STEPS})",
  )
  parser.add_argument(
    "--parallel", type=int, default=2, help="clusters that run at once (>= 1)"
  )
  args = parser.parse_args(argv)
  names = [n for n in args.only.split(",") if n] or list(faults_lib.FAULTS)
  unknown = sorted(set(names) - set(faults_lib.FAULTS))
  if unknown:
    parser.error(
      f"unknown faults {unknown}; choose from {list(faults_lib.FAULTS)}"
    )
  if args.parallel < 1:
    parser.error(f"--parallel must be 1 or more, not {args.parallel}")
  if args.train_steps < faults_lib.MIN_STEPS:
    parser.error(
      f"--train_steps must be at least {faults_lib.MIN_STEPS} (the faults "
      f"begin at step {faults_lib.FAULT_STEP}), not {args.train_steps}"
    )
  try:  # Where no cluster can be made, that is the sentence.
    netns_cluster.check_available()
    storage.check_writable(args.results_dir)
  except (errors.UserError, netns_cluster.Unavailable) as e:
    print(f"error: {e}", file=sys.stderr)
    return errors.USER_ERROR_EXIT_CODE
  testing.share_few_cores()  # Two clusters of TensorFlow nodes on 2 cores.
  latest = os.path.join(args.results_dir, "latest")
  shutil.rmtree(latest, ignore_errors=True)
  os.makedirs(latest)
  work = tempdirs.scratch_dir(WORK_PREFIX)
  started = time.monotonic()
  try:
    # The reference last: it is the shortest, so it fills the last gap.
    runs = _run_all([*names, REFERENCE], work, args.train_steps, args.parallel)
    reference = runs.pop(REFERENCE)
    faults_lib.judge(reference, reference.fingerprint)
    results = [faults_lib.judge(runs[n], reference.fingerprint) for n in names]
    for result in [reference, *results]:
      print(_row(result), flush=True)
      if not result.passed:
        _keep_logs(result.name, work, latest)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  _write(latest, reference, results, time.monotonic() - started)
  held = all(r.passed for r in [reference, *results])
  print(f"cluster-check: {'PASS' if held else 'FAIL'}; {latest}/results.md")
  return 0 if held else 1


def _run_all(names, work, steps, parallel) -> dict[str, faults_lib.Result]:
  """Runs each of `names` (`faults_lib.run_fault`), `parallel` at a time:
  `parallel` runner processes, each running its share one after another,
  so two clusters at once never share a process; a runner dies with this
  process (its clusters are then removed at the next start, as a SIGKILLed
  harness's are)."""
  with futures.ProcessPoolExecutor(
    max_workers=parallel,
    mp_context=multiprocessing.get_context("spawn"),
    initializer=reaper.die_with,
    initargs=(os.getpid(),),
  ) as pool:
    pending = {
      pool.submit(
        faults_lib.run_fault,
        name,
        workdir=os.path.join(work, name),
        steps=steps,
      ): name
      for name in names
    }
    runs = {}
    for done in futures.as_completed(pending):
      runs[pending[done]] = result = done.result()
      print(f"{result.name}: ran in {result.seconds} s", flush=True)
  return runs


def _keep_logs(name, work, latest) -> None:
  """Copies each node's log of run `name` to `<latest>/logs/<name>`."""
  logs = os.path.join(latest, "logs", name)
  os.makedirs(logs)
  for path in glob.glob(os.path.join(work, name, "*.log")):
    shutil.copy(path, logs)


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
