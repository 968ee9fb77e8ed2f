"""The playground's function server: the workspace's reward in the SDK's server, as training runs it.

Why a kept server: training and ``opd eval`` score through the SDK's function server, so the
playground does too (same parsing of the request, same replies, same errors), and one server
started once answers each later score in milliseconds instead of a fresh interpreter per score.
Why the fingerprint: the playground must score the user's *latest* edit, so a server whose code
files changed since it started is replaced by a fresh one before the next score.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

from opd_nb.functions.server import CLEAN_ROUTE_ENV, FunctionServer

SKIP_DIRS = frozenset({"__pycache__", "data", "outputs", "node_modules", "venv"})  # not code; may be large
STARTUP_TIMEOUT_S = 60.0

_lock = threading.Lock()  # one start at a time: a warm-up and a score share the server they start
_servers: dict[tuple[str, str, tuple], tuple[tuple, FunctionServer]] = {}  # key -> (fingerprint, server)


def code_fingerprint(code_dir: Path) -> tuple:
    """(path, mtime, size) of every .py file under `code_dir`: changes whenever the user saves one."""
    found = []
    for root, dirs, names in os.walk(code_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        for name in sorted(names):
            if name.endswith(".py"):
                try:
                    st = os.stat(os.path.join(root, name))
                except OSError:
                    continue
                found.append((os.path.join(root, name), st.st_mtime_ns, st.st_size))
    return tuple(found)


def server_for(code_dir: Path, classpath: str, env: dict[str, str] | None = None) -> FunctionServer:
    """A healthy reward server running the current code of `code_dir` (started or reused).

    Raises OpdError, with the server's log, when the code does not load.
    """
    key = (str(code_dir), classpath, tuple(sorted((env or {}).items())))
    with _lock:
        fingerprint = code_fingerprint(code_dir)
        known = _servers.get(key)
        if known is not None:
            if known[0] == fingerprint and known[1].alive():
                return known[1]
            known[1].stop()
            del _servers[key]
        server = FunctionServer.start(
            code_dir,
            "reward",
            classpath,
            env={**(env or {}), CLEAN_ROUTE_ENV: "1", "PYTHONDONTWRITEBYTECODE": "1"},
            startup_timeout=STARTUP_TIMEOUT_S,
        )
        _servers[key] = (fingerprint, server)
        return server


def warm(code_dir: Path, classpath: str, env: dict[str, str] | None = None) -> None:
    """Start the server in a background thread, so the first score does not wait for it.

    A failure is left for the first score to report (it starts the server again and raises)."""

    def start() -> None:
        try:
            server_for(code_dir, classpath, env)
        except Exception:  # noqa: BLE001 - reported by the next score, on the caller's thread
            pass

    threading.Thread(target=start, name="opd-playground-warm", daemon=True).start()


@atexit.register
def stop_all() -> None:
    """Stop every playground server (they also stop by themselves once the kernel is gone)."""
    with _lock:
        for _, server in _servers.values():
            server.stop()
        _servers.clear()
