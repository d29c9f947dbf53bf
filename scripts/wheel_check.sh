#!/usr/bin/env bash
# make wheel-check: the package as a user installs it. Builds the wheel,
# installs it with its core dependencies only (no extras; the exact versions
# of constraints.txt) into a new, empty venv, checks that `import ctl` and the
# console scripts come from that venv, that no generic top-level name (such
# as `trainer`: scripts/wheel_names.py) is installed and no scikit-learn came
# with it, trains the quick start's digits (shipped in the wheel as the
# trainer's bundled data) for 10 steps with `ctl-train`, then runs
# examples/own_model.py (not in the wheel) from the checkout with the venv's
# python, in a directory outside the checkout. The dependencies' wheels are kept in WHEELHOUSE (default
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
wheel=$(ls "$work"/dist/ctl_train_loop-*.whl)

step "check its top-level names"
"$PY" scripts/wheel_names.py "$wheel"

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
# Each lists its flags and exits 0, no traceback.
for script in ctl-train ctl-launch ctl-vertex ctl-k8s ctl-report; do
  if ! help=$("$work/venv/bin/$script" --help 2>&1) \
      || [[ $help != *--helpfull* || $help == *Traceback* ]]; then
    echo "wheel-check: $script --help said: ${help: -2000}" >&2
    exit 1
  fi
done
for extra in pytest sklearn trainer; do
  if "$venv_py" -c "import $extra" 2>/dev/null; then
    echo "wheel-check: the wheel without extras brought $extra" >&2
    exit 1
  fi
done

step "train the bundled digits with the wheel's ctl-train"
TF_CPP_MIN_LOG_LEVEL=2 "$work/venv/bin/ctl-train" --dataset=digits \
  --model=small_cnn --image_size=16 --per_replica_batch_size=32 \
  --train_steps=10 --steps_per_loop=10 --noexport --model_dir="$work/digits"

step "run examples/own_model.py with the wheel"
TF_CPP_MIN_LOG_LEVEL=2 "$venv_py" "$repo/examples/own_model.py" \
  --model_dir="$work/own_model"
step "ok"
