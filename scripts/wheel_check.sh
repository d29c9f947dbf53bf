#!/usr/bin/env bash
# make wheel-check: the package as a user installs it. Builds the wheel,
# installs it with its core dependencies only (no extras; the exact versions
# of constraints.txt) into a new, empty venv, checks that `import ctl` and the
# console scripts come from that venv, then runs examples/own_model.py (not in
# the wheel) from the checkout with the venv's python, in a directory outside
# the checkout. The dependencies' wheels are kept in WHEELHOUSE (default
# ~/.cache/ctl-wheel-check; pip's own HTTP cache is not written on every
# machine): only the first run downloads them. Everything else is made in a
# temporary directory, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
repo=$PWD
wheelhouse=${WHEELHOUSE:-$HOME/.cache/ctl-wheel-check}
work=$(mktemp -d /tmp/ctl-wheel-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
unset PYTHONPATH  # Nothing of the checkout may leak into the venv's imports.

step() { echo "==== wheel-check: $* ($((SECONDS - started)) s)" >&2; }
started=$SECONDS

step "build the wheel"
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$repo"
wheel=$(ls "$work"/dist/ctl-*.whl)

step "fetch the missing dependency wheels into $wheelhouse"
"$PY" -m pip download --quiet --dest "$wheelhouse" \
  -c "$repo/constraints.txt" "$wheel"

step "install $(basename "$wheel") into an empty venv"
"$PY" -m venv "$work/venv"
venv_py=$work/venv/bin/python
"$venv_py" -m pip install --quiet --no-index --find-links "$wheelhouse" \
  -c "$repo/constraints.txt" "$wheel"

step "import ctl and the console scripts from the venv"
cd "$work"
where=$("$venv_py" -c 'import ctl; print(ctl.__file__)')
case $where in
  "$work"/venv/*) ;;
  *) echo "wheel-check: ctl was imported from $where" >&2; exit 1 ;;
esac
# Each prints its flags (absl's --help, ctl-train's, exits 1), no traceback.
for script in ctl-train ctl-launch ctl-vertex ctl-k8s ctl-report; do
  help=$("$work/venv/bin/$script" --help 2>&1) || true
  if [[ $help != *--help* || $help == *Traceback* ]]; then
    echo "wheel-check: $script --help said: ${help: -2000}" >&2
    exit 1
  fi
done
if "$venv_py" -c 'import pytest' 2>/dev/null; then
  echo "wheel-check: the test extras were installed" >&2
  exit 1
fi

step "run examples/own_model.py with the wheel"
TF_CPP_MIN_LOG_LEVEL=2 "$venv_py" "$repo/examples/own_model.py" \
  --model_dir="$work/own_model"
step "ok"
