# The two commands a new user runs:  make demo  (train the offline default)
#                                    make test  (run the test suite)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MODEL_DIR ?= runs/quickstart

.PHONY: demo test lint format bench container-check clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Stamp files: reinstall only when the package metadata changes.
$(VENV)/.installed: $(VENV)/bin/python setup.cfg pyproject.toml
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/bin/python setup.cfg pyproject.toml
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(VENV)/.installed $@

demo: $(VENV)/.installed
	$(PY) -m trainer.task --flagfile=configs/quickstart.cfg --model_dir=$(MODEL_DIR)

# The lint runs first: a formatting or lint error fails `make test` (and CI).
test: lint
	$(PY) -m pytest -q -n 2 --dist loadfile

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .

format: $(VENV)/.installed-test
	$(VENV)/bin/ruff format --quiet .
	$(VENV)/bin/ruff check --quiet --fix .

bench: $(VENV)/.installed-test
	$(PY) -m benchmarks.run_all --results_dir=bench_results

# Builds the Dockerfile with podman and checks the image in real containers
# (as root on Debian; see README "Build and test the image locally").
# CONTAINER_CHECK_FLAGS=--keep keeps the images and the store.
container-check:
	$(PYTHON) scripts/container_check.py $(CONTAINER_CHECK_FLAGS)

clean:
	rm -rf $(VENV) runs bench_results .pytest_cache
