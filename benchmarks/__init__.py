"""Benchmarks of the ctl engine against the alternatives, on the same machine.

`python -m benchmarks.run_all --results_dir=bench_results` (`make bench`) runs
every benchmark app listed in `run_all.BENCHMARKS`, each in its own process,
and writes a JSON file, a Markdown report and a PNG chart.
"""
