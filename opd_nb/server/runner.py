"""Serve the control plane in this process until Ctrl-C (`opd serve run`, ``python -m opd_nb.server``)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from opd_nb.constants import LOCAL_HOST, LOCAL_PORT
from opd_nb.server.lifecycle import default_data_dir


def serve_forever(
    host: str = LOCAL_HOST,
    port: int = LOCAL_PORT,
    data_dir: str | Path | None = None,
    model_map: dict[str, str] | None = None,
    *,
    max_running: int = 1,
    ready_file: str | None = None,
    log_level: str = "warning",
) -> int:
    """Bind first (so a taken port is a clear exit 2), then write the bound port to ``ready_file``."""
    import uvicorn

    from opd_nb.server.app import create_app

    data_dir = Path(data_dir).expanduser() if data_dir else default_data_dir()
    app = create_app(data_dir, model_map, max_running=max_running)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        print(
            f"error: cannot listen on {host}:{port}: {exc.strerror} "
            "(pick another --port, or `opd serve status` to see a running server)",
            file=sys.stderr,
        )
        return 2
    sock.listen(2048)
    sock.set_inheritable(True)
    if ready_file:
        tmp = f"{ready_file}.tmp"
        Path(tmp).write_text(str(sock.getsockname()[1]))
        os.replace(tmp, ready_file)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
    return 0
