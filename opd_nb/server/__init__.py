"""`opd serve`: a local control plane that answers the Bailian fine-tune API.

``start()`` runs it in a background subprocess (so a notebook or a test can use it) and returns a
:class:`ServerHandle`; ``start_background()`` does the same for `opd serve start`, reusing a healthy
recorded server, and answers with a typed start result. The server stores everything in
``data_dir`` (SQLite WAL plus files), so a restarted server knows every job and file. Importing this
package is light (no FastAPI): the app lives in :mod:`opd_nb.server.app`.
"""

from __future__ import annotations

from opd_nb.server.lifecycle import (
    ServerHandle,
    running_server,
    running_servers,
    server_status,
    start,
    start_background,
    stop_background,
)
from opd_nb.server.records import (
    ServeOptions,
    ServerInfo,
    ServerStatus,
    StartFailed,
    StartLaunched,
    StartResult,
    StartReused,
    StartTimedOut,
    default_data_dir,
    read_state,
    state_file,
)

__all__ = [
    "ServeOptions",
    "ServerHandle",
    "ServerInfo",
    "ServerStatus",
    "StartFailed",
    "StartLaunched",
    "StartResult",
    "StartReused",
    "StartTimedOut",
    "default_data_dir",
    "read_state",
    "running_server",
    "running_servers",
    "server_status",
    "start",
    "start_background",
    "state_file",
    "stop_background",
]
