# The two commands a new user runs:  make demo  (train the offline default)
#                                    make test  (run the test suite)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MODEL_DIR ?= runs/quickstart

.PHONY: bytecode demo test test-fast lint format bench bench-quick cluster-check container-check container-image browser-check wheel-check clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Stamp files: reinstall only when the package metadata or a pin changes.
# setup.cfg declares ranges; constraints.txt holds the exact versions.
$(VENV)/.installed: $(VENV)/bin/python setup.cfg pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/bin/python setup.cfg pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $(VENV)/.installed $@

# Python may be told not to write bytecode (PYTHONDONTWRITEBYTECODE=1, as
# in CI's environment): then every process compiles the project's modules
# anew, 0.1 s of CPU at each of the suite's few hundred trainer starts
# (0.15 s to import ctl and the trainer with it, 0.25 s without). Written
# here once; a module edited since is compiled in memory, as it was.
bytecode: $(VENV)/.installed
	$(PY) -m compileall -q ctl trainer benchmarks

demo: $(VENV)/.installed bytecode
	$(PY) -m trainer.task --flagfile=configs/quickstart.cfg --model_dir=$(MODEL_DIR)

# The lint runs first: a formatting or lint error fails `make test` (and CI).
# The browser tests run once, in `make browser-check`, which installs the
# browser they need.
test: lint bytecode
	$(PY) -m pytest -q -n 4 --dist loadfile --no-loadscope-reorder --durations=20 -m "not browser"

# The fast tier, for a contributor's every change: the tests that start no
# process (one that does fails here and belongs in the slow tier,
# `@pytest.mark.processes`); `make test` runs both, as CI does.
test-fast: lint bytecode
	CTL_TEST_TIER=fast $(PY) -m pytest -q -n 4 --dist loadfile -m "not processes"

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .

format: $(VENV)/.installed-test
	$(VENV)/bin/ruff format --quiet .
	$(VENV)/bin/ruff check --quiet --fix .

bench: $(VENV)/.installed-test bytecode
	$(PY) -m benchmarks.run_all --results_dir=bench_results $(BENCH_FLAGS)

# Every benchmark section on tiny settings (CI): exits 1 naming a section
# that failed, timed out or was skipped. The numbers mean nothing, so two
# sections run at a time (most use one core).
bench-quick: $(VENV)/.installed-test bytecode
	$(PY) -m benchmarks.run_all --results_dir=bench_results/quick --quick --parallel=2 $(BENCH_FLAGS)

# The six faults between nodes (a node lost, partitions, a flapping link, the
# bucket lost by the chief, a stale chief) on a cluster of network namespaces,
# as root, two clusters at a time (CLUSTER_CHECK_FLAGS=--parallel=1 for one);
# writes cluster_results/latest/results.json and results.md
# (docs/fault-tolerance.md, "Faults between nodes").
cluster-check: $(VENV)/.installed-test bytecode
	$(PY) -m benchmarks.cluster.check --results_dir=cluster_results $(CLUSTER_CHECK_FLAGS)

# Builds the Dockerfile with podman and checks the image in real containers
# (as root on Debian; see docs/container.md).
# CONTAINER_CHECK_FLAGS=--keep keeps the images and the store.
container-check:
	$(PYTHON) scripts/container_check.py $(CONTAINER_CHECK_FLAGS)

# Only the image container-check builds, kept for it (CI builds it beside the
# wheel check; container-check then builds from its layers and removes it).
container-image:
	$(PYTHON) scripts/container_check.py --build_only

# The TensorBoard browser check with Debian's chromium and chromium-driver,
# installed with apt-get as root when missing; where they cannot be installed
# it says so loudly and exits 0 (skipped). See scripts/browser_check.sh.
browser-check: $(VENV)/.installed-test
	PY=$(PY) scripts/browser_check.sh

# The package as a user installs it: builds the wheel, installs it (no
# extras) into a new venv, and runs examples/own_model.py with that venv's
# python from outside the checkout, so `import ctl` comes from the wheel.
# pip's cache makes every run after the first download nothing.
wheel-check: $(VENV)/.installed-test
	PY=$(PY) scripts/wheel_check.sh

clean:
	rm -rf $(VENV) runs bench_results cluster_results .pytest_cache
