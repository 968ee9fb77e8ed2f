#!/usr/bin/env bash
# Set up a fresh machine and run every test: lint, unit and end-to-end tests, the browser test and
# the tutorial notebooks (nbval). `--fast` (first argument) runs lint and every test that is not
# marked slow, for the edit-test loop. Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${OPD_VENV:-.venv}"
FAST=0
if [ "${1:-}" = "--fast" ]; then FAST=1; shift; fi
bash scripts/setup.sh
# Headless Chromium for the JupyterLab end-to-end test (Debian packages).
if [ "$FAST" = 0 ] && { ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; }; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/lint-imports"
# Two workers, each file on one (its module fixtures and a notebook's cells stay together): a tiny
# training job keeps about one core busy, so two files at once use both (measured in issue 22's note).
# Files go out in collection order (conftest puts the longest first), not by their number of tests.
# One thread per torch process: two jobs at once with two OpenMP threads each spin against each other.
export OMP_NUM_THREADS=1
PYTEST=("$VENV/bin/python" -m pytest -p no:cacheprovider --durations=30 -n 2 --dist loadfile --no-loadscope-reorder)
if [ "$FAST" = 1 ]; then
  "${PYTEST[@]}" tests -m "not slow" "$@"
else
  "${PYTEST[@]}" tests notebooks --nbval-lax --nbval-sanitize-with notebooks/sanitize.cfg "$@"
fi
