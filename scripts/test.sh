#!/usr/bin/env bash
# Set up a fresh machine and run every test: lint (ruff, import contracts, pyright), unit and end-to-end
# tests, the browser test and the tutorial notebooks (nbval). `--fast` (first argument) runs lint and
# every test that is not marked slow, for the edit-test loop. Other arguments go to pytest.
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
# The type checker ([tool.pyright] in pyproject.toml), timed: it reads torch and transformers, so it
# is the slowest of the lint steps.
start=$SECONDS
"$VENV/bin/pyright" --pythonpath "$VENV/bin/python"
echo "pyright: $((SECONDS - start)) s"
# A file per worker (module fixtures stay together), the longest files first (conftest orders them by
# tests/durations.json; xdist's own reorder is off). The full suite runs three workers on two cores: on
# two, the cores idled 15% of the run (tests waiting on servers, jobs and browsers), on three 2%, and it
# took 796 s instead of 873 s here. The fast lane computes without waiting, so it keeps two (a third
# made it slower: 42 s against 36 s). One torch thread per process: jobs at once with two OpenMP
# threads each spin against each other.
WORKERS=3
if [ "$FAST" = 1 ]; then WORKERS=2; fi
XDIST=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder)
if [ "$FAST" = 1 ]; then
  # nbval stays unloaded: no notebook runs here, and its import (nbformat, jsonschema's IRI grammar)
  # costs each worker 3 s.
  OMP_NUM_THREADS=1 "$VENV/bin/python" -m pytest -p no:cacheprovider -p no:nbval --durations=30 "${XDIST[@]}" \
    tests -m "not slow" "$@"
else
  OMP_NUM_THREADS=1 "$VENV/bin/python" -m pytest -p no:cacheprovider --durations=30 "${XDIST[@]}" \
    tests notebooks --nbval-lax --nbval-sanitize-with notebooks/sanitize.cfg "$@"
fi
