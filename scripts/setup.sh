#!/usr/bin/env bash
# Set up opd-nb on a fresh machine: a venv with the CPU PyTorch wheel first (an open `torch`
# requirement would pull a multi-GB CUDA build), then the project with every extra.
# The installs go through uv (from PyPI, into the venv): it resolves and links in parallel, about
# ten times faster than pip here; pip stays the fallback where uv cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${OPD_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
if "${PIP[@]}" uv >/dev/null 2>&1 && [ -x "$VENV/bin/uv" ]; then
  # uv reads no pip.conf: hand it the machine's local wheels (the CPU torch wheel) the way pip sees them.
  links="${PIP_FIND_LINKS:-$("$VENV/bin/python" -m pip config get global.find-links 2>/dev/null || true)}"
  INSTALL=("$VENV/bin/uv" pip install -q --python "$VENV/bin/python" ${links:+--find-links "$links"})
else
  INSTALL=("${PIP[@]}")
fi
"${INSTALL[@]}" torch==2.13.0
"${INSTALL[@]}" -e '.[all]'
echo "opd-nb is installed in $VENV ($("$VENV/bin/opd" version))"
