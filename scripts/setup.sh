#!/usr/bin/env bash
# Set up opd-nb on a fresh machine: a venv with the CPU PyTorch wheel first (an open `torch`
# requirement would pull a multi-GB CUDA build), then the project with every extra.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${OPD_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check torch==2.13.0
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[all]'
echo "opd-nb is installed in $VENV ($("$VENV/bin/opd" version))"
