"""Benchmarks of the ctl engine against the alternatives, on the same machine.

`python -m benchmarks.run_all --results_dir=bench_results` (`make bench`) runs
every section listed in `run_all.BENCHMARKS`, each in its own process, and
writes a JSON file, a Markdown report and a PNG chart. Its folders, lowest
first (docs/design.md, "Layers"):

  harness/: what every section shares (flags, budget, statistics, report).
  workloads/: what the sections run (ways to train, models' costs, data).
  speed/: the sections that measure speed (throughput, input, scaling).
  recovery/: the sections that measure faults and recovery (checkpoints,
    tiers, restart, goodput, stalls).

and its module:

  run_all: runs every section, each in its own process, and writes the
    report.
"""
