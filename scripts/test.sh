#!/usr/bin/env bash
# Set up a fresh machine and run every test: lint, unit and end-to-end tests, the browser test and
# the tutorial notebooks (nbval). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${OPD_VENV:-.venv}"
bash scripts/setup.sh
# Headless Chromium for the JupyterLab end-to-end test (Debian packages).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/lint-imports"
"$VENV/bin/python" -m pytest tests notebooks --nbval-lax --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider --durations=30 "$@"
