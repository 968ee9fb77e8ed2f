#!/usr/bin/env bash
# Set up opd-nb on a fresh machine: a venv with the CPU PyTorch wheel first (an open `torch`
# requirement would pull a multi-GB CUDA build), then the project with every extra.
# The installs go through uv (from PyPI, into the venv): it resolves and links in parallel, about
# ten times faster than pip here; pip stays the fallback where uv cannot be installed or fails.
# Both write the bytecode at install (pip's default; uv's --compile-bytecode), and the editable package's
# own is compiled after: where PYTHONDONTWRITEBYTECODE is set (as on our machines), nothing writes
# it later, and every process that imports torch and transformers would compile them again (8.2 s
# instead of 4.5 s here, in each server, worker, kernel and CLI call of the suite).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${OPD_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# A venv installed by this script from this pyproject.toml is kept as it is (the edit-test loop,
# `scripts/test.sh --fast`, saves the 4 s the installs take to find nothing to do); delete the stamp to
# install again.
STAMP="$VENV/.opd-nb-installed"
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
installed() {
  "$VENV/bin/python" -m compileall -q -j 0 opd_nb >/dev/null
  echo "opd-nb is installed in $VENV ($("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("opd-nb"))'))"
}
if [ -x "$VENV/bin/opd" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ]; then
  installed
  exit 0
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
UV=()
if [ -x "$VENV/bin/uv" ] || { "${PIP[@]}" uv >/dev/null 2>&1 && [ -x "$VENV/bin/uv" ]; }; then
  # uv reads no pip.conf: hand it the machine's local wheels (the CPU torch wheel) the way pip sees them.
  links="${PIP_FIND_LINKS:-$("$VENV/bin/python" -m pip config get global.find-links 2>/dev/null || true)}"
  UV=("$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" ${links:+--find-links "$links"})
fi
# uv first; where it fails (it reads none of pip's configuration: a custom certificate authority, a
# private index) pip does this install and the rest, and one line says so.
install() {
  if [ ${#UV[@]} -gt 0 ]; then
    local err
    if err=$("${UV[@]}" "$@" 2>&1); then return 0; fi
    echo "setup: uv could not install $* ($(printf '%s\n' "$err" | grep -v '^[[:space:]]*$' | tail -n 1)); uv reads none of pip's configuration (certificates, index), so pip installs instead" >&2
    UV=()
  fi
  "${PIP[@]}" "$@"
}
install torch==2.13.0
install -e '.[all]'
echo "$WANT" > "$STAMP"
installed
