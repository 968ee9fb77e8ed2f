"""`opd serve`: a local control plane that answers the Bailian fine-tune API.

``start()`` runs it in a background subprocess (so a notebook or a test can use it) and returns a
:class:`ServerHandle`. The server stores everything in ``data_dir`` (SQLite WAL plus files), so a
restarted server knows every job and file. Importing this package is light (no FastAPI).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from opd_nb.errors import OpdError

__all__ = ["ServerHandle", "start", "default_data_dir", "state_file", "read_state"]


def default_data_dir() -> Path:
    """``$OPD_DATA_DIR``, else ``$XDG_CACHE_HOME/opd-nb/server`` (``~/.cache/opd-nb/server``)."""
    if os.environ.get("OPD_DATA_DIR"):
        return Path(os.environ["OPD_DATA_DIR"]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "opd-nb" / "server"


def state_file() -> Path:
    """Where background servers started by `opd serve start` are recorded (for `stop`/`status`)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "opd-nb" / "serve-state.json"


def read_state() -> dict[str, Any] | None:
    try:
        data = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class ServerHandle:
    """A running local control plane (background subprocess)."""

    def __init__(
        self, process: subprocess.Popen | None, host: str, port: int, data_dir: Path, pid: int | None = None
    ):
        self.process = process
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir)
        self.pid = pid if pid is not None else (process.pid if process else None)

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    @property
    def api_base(self) -> str:
        return self.base_url + "/api/v1"

    def env(self) -> dict[str, str]:
        """The two variables a workspace (and the dashscope SDK) needs to target this server."""
        return {"DASHSCOPE_HTTP_BASE_URL": self.api_base, "DASHSCOPE_API_KEY": "local"}

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if not self.pid:
            return False
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return True

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server: running jobs are stopped and recorded as FAILED (local jobs do not resume)."""
        if not self.alive():
            return
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            return
        os.kill(self.pid, signal.SIGINT)  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.1)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)  # type: ignore[arg-type]

    def kill(self) -> None:
        """SIGKILL the server (tests of crash recovery)."""
        if self.pid and self.alive():
            os.kill(self.pid, signal.SIGKILL)
            if self.process is not None:
                self.process.wait(5)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "host": self.host,
            "port": self.port,
            "data_dir": str(self.data_dir),
            "base_url": self.base_url,
            "api_base": self.api_base,
        }

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else "stopped"
        return f"ServerHandle({self.base_url}, data_dir={str(self.data_dir)!r}, {state})"

    def _repr_html_(self) -> str:
        import html

        rows = "".join(
            f"<tr><td><code>{k}</code></td><td><code>{html.escape(v)}</code></td></tr>"
            for k, v in self.env().items()
        )
        state = "running" if self.alive() else "stopped"
        return (
            f"<div><b>opd serve</b> {state} at <code>{self.base_url}</code> "
            f"(data: <code>{html.escape(str(self.data_dir))}</code>)<table>{rows}</table></div>"
        )


def start(
    host: str = "127.0.0.1",
    port: int = 0,
    data_dir: str | Path | None = None,
    model_map: dict[str, str] | None = None,
    *,
    max_running: int = 1,
    startup_timeout: float = 60.0,
    log_path: str | Path | None = None,
    detach: bool = False,
) -> ServerHandle:
    """Start the control plane in a background subprocess and wait until it answers `/health`."""
    import httpx

    data_dir = Path(data_dir).expanduser().resolve() if data_dir else default_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    fd, ready = tempfile.mkstemp(prefix="opd-serve-", suffix=".port")
    os.close(fd)
    os.unlink(ready)
    cmd = [
        sys.executable,
        "-m",
        "opd_nb.server",
        "--host",
        host,
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--ready-file",
        ready,
        "--max-running",
        str(max_running),
    ]
    for key, value in (model_map or {}).items():
        cmd += ["--model-map", f"{key}={value}"]
    log_path = Path(log_path) if log_path else data_dir / "server.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
        )
    deadline = time.monotonic() + startup_timeout
    bound: int | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-10:])
            raise OpdError(
                f"the local control plane exited at startup (code {process.returncode}):\n{tail}",
                fix="see the message above; `opd serve status` shows a server already running",
            )
        if bound is None and os.path.exists(ready):
            bound = int(Path(ready).read_text() or 0) or None
            if bound:
                os.unlink(ready)
        if bound:
            handle = ServerHandle(process, host, bound, data_dir)
            try:
                if httpx.get(handle.base_url + "/health", timeout=2.0).status_code == 200:
                    return handle
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    process.kill()
    raise OpdError(f"the local control plane did not start within {startup_timeout:.0f}s (log: {log_path})")
