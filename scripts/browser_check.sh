#!/usr/bin/env bash
# make browser-check: the tests marked `browser`, which `make test` leaves to
# it (headless Chromium draws
# train and validation in one chart: the trainer's accuracy,
# tests/test_trainer.py, and a regression's own MAE and RMSE,
# tests/test_any_model.py) with Debian's
# chromium and chromium-driver, installed with apt-get as root when missing,
# as scripts/container_check.py installs buildah. Where they cannot be
# installed (not root, no apt-get, no mirror) it says so loudly and exits 0:
# the check is skipped, not passed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

have_browser() { command -v chromium && command -v chromedriver; } >/dev/null

if ! have_browser && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "apt-get install chromium chromium-driver"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || true
  apt-get install -y -qq --no-install-recommends chromium chromium-driver \
    >/dev/null || true
fi
if ! have_browser; then
  echo "######## browser-check SKIPPED: chromium and chromedriver are not" \
    "installed and could not be (needs root, apt-get and a Debian mirror)." \
    "The TensorBoard browser check did NOT run. ########" >&2
  exit 0
fi
"$PY" -m pytest -q -m browser
