"""Start, find and stop the local control plane: one background server per data dir, each recorded.

Modelled on TensorBoard's ``manager.py``. The records (:class:`ServerInfo`, :class:`ServeOptions`, the
typed start results, the state and owner files) are :mod:`opd_nb.server.records`; this module launches
and probes. :func:`start_background` answers with a typed result, :class:`StartReused`,
:class:`StartLaunched`, :class:`StartFailed` or :class:`StartTimedOut`, and front ends (`opd serve
start`, ``%opd serve start``) branch on its type. :func:`start` is the plain launcher that tests,
the demo and the bench use: it returns a :class:`ServerHandle` (also a context manager) or raises
an :class:`~opd_nb.errors.OpdError`. Importing this module is light: no FastAPI, and httpx only
once a server is polled.

One server owns a data dir: it holds ``<data_dir>/server.lock`` (``records.DataDirLock``) and describes
itself in ``<data_dir>/server.json``, so a second server is refused with the owner's URL and pid, and
:func:`start_background` reuses the owner. A server key (``--api-key`` or ``OPD_SERVE_API_KEY``)
travels to the child in its environment, never on its command line, and no record holds it.
"""

from __future__ import annotations

import html
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from opd_nb import settings
from opd_nb.constants import LOCAL_PORT
from opd_nb.server.records import (
    API_KEY_ENV,
    ServeOptions,
    ServerInfo,
    ServerStatus,
    StartFailed,
    StartLaunched,
    StartResult,
    StartReused,
    StartTimedOut,
    clear_state,
    read_owner,
    read_state,
    read_states,
    resolve_data_dir,
    server_urls,
    write_state,
)
from opd_nb.wire import http_client

_LOG_TAIL_LINES = 10
_POLL_S = 0.1


# ---- probing -------------------------------------------------------------------------------------
def _pid_alive(pid: int | None) -> bool:
    """The process exists and is not a zombie (a stopped child nobody has reaped yet)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): the signal check is all there is


def _healthy(base_url: str, key_required: bool = False) -> bool:
    """Whether the server answers; one with a server key answers 401 to us, which is enough."""
    import httpx

    try:  # a loopback check: never through a proxy from the environment
        code = http_client.get(base_url + "/health", timeout=2.0, trust_env=False).status_code
    except httpx.HTTPError:
        return False
    return code == 200 or (key_required and code == 401)


def _is_running(info: ServerInfo) -> bool:
    return _pid_alive(info.pid) and _healthy(info.base_url, info.key_required)


# The servers this process launched with start_background, by data dir: a kernel stops only these
# unless it names a data dir (another notebook's server is not its to stop).
_STARTED_HERE: dict[Path, ServerInfo] = {}


def running_servers() -> list[ServerInfo]:
    """Every recorded background server that is alive and answers, newest first."""
    return [info for info in read_states() if _is_running(info)]


def running_server(data_dir: str | Path | None = None) -> ServerInfo | None:
    """The background server to use: ``data_dir``'s if given; else one this process started, the
    default data dir's, or the newest recorded; None when none is alive."""
    if data_dir is not None:
        return _alive(read_state(data_dir)) or data_dir_owner(data_dir)
    for info in [*reversed(_STARTED_HERE.values()), read_state(), *read_states()]:
        if _alive(info) is not None:
            return info
    return None


def _alive(info: ServerInfo | None) -> ServerInfo | None:
    return info if info is not None and _is_running(info) else None


def server_status(data_dir: str | Path | None = None) -> ServerStatus:
    """``data_dir``'s recorded server (None: the one :func:`running_server` picks, else the default's record)."""
    recorded = running_server(data_dir) or read_state(data_dir)
    return ServerStatus(recorded=recorded, running=recorded is not None and _is_running(recorded))


def data_dir_owner(data_dir: str | Path) -> ServerInfo | None:
    """The live, answering server that owns ``data_dir``, or None."""
    info = read_owner(resolve_data_dir(data_dir))
    return info if info is not None and _is_running(info) else None


def owned_message(data_dir: str | Path, wait_s: float = 3.0) -> str:
    """The one line a second server on a locked data dir exits with (waits briefly for the record)."""
    deadline = time.monotonic() + wait_s
    info = read_owner(data_dir)
    while (info is None or not _pid_alive(info.pid)) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        info = read_owner(data_dir)
    who = (
        f"the opd serve at {info.base_url} (pid {info.pid})"
        if info is not None and _pid_alive(info.pid)
        else "another opd serve that is starting up"
    )
    return (
        f"error: data dir {data_dir} is in use by {who}; use that server (`opd serve start` reuses it), "
        "stop it first, or pick another --data-dir"
    )


class ServerHandle:
    """A running local control plane (background subprocess)."""

    def __init__(
        self,
        process: subprocess.Popen[bytes] | None,
        host: str,
        port: int,
        data_dir: Path,
        pid: int | None = None,
        log_path: str | Path = "",
        *,
        api_key: str | None = None,
        key_required: bool | None = None,
    ):
        self.process = process
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir)
        self.pid = pid if pid is not None else (process.pid if process else None)
        self.log_path = str(log_path)
        self._api_key = api_key  # in memory only, for env(); never in a repr or a record
        self.key_required = bool(api_key) if key_required is None else key_required

    @classmethod
    def attach(cls, info: ServerInfo) -> ServerHandle:
        """A handle on a server started by another process (from its state-file record)."""
        return cls(
            None,
            info.host,
            info.port,
            Path(info.data_dir),
            pid=info.pid,
            log_path=info.log_path,
            key_required=info.key_required,
        )

    @property
    def base_url(self) -> str:
        return server_urls(self.host, self.port)[0]

    @property
    def api_base(self) -> str:
        return server_urls(self.host, self.port)[1]

    @property
    def info(self) -> ServerInfo:
        return ServerInfo.at(
            self.pid or 0, self.host, self.port, self.data_dir, self.log_path, self.key_required
        )

    def env(self) -> dict[str, str]:
        """The variables a workspace (and the dashscope SDK) needs to target this server.

        With a server key this holds the key, if this handle started the server with it: as
        ``OPD_SERVE_API_KEY`` (what `opd` and `submit_job.py --local` send a local plane) and as
        ``DASHSCOPE_API_KEY`` (what a script of the user's own hands the SDK).
        """
        env = self.info.env()
        if self._api_key:
            env["DASHSCOPE_API_KEY"] = env[settings.SERVE_API_KEY.name] = self._api_key
        return env

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return _pid_alive(self.pid)

    def stop(self, timeout: float = 15.0, sig: int = signal.SIGINT) -> None:
        """Stop the server (SIGINT, or ``sig``): a running job is interrupted and resumes at the next start."""
        pid = self.pid
        if pid is None or not self.alive():  # no pid: nothing of ours runs (alive() says the same)
            return
        if self.process is not None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            return
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            time.sleep(_POLL_S)
        if self.alive():
            os.kill(pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the server (tests of crash recovery)."""
        if self.pid and self.alive():
            os.kill(self.pid, signal.SIGKILL)
            if self.process is not None:
                self.process.wait(5)

    def to_dict(self) -> dict[str, Any]:
        return self.info.model_dump()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else "stopped"
        return f"ServerHandle({self.base_url}, data_dir={str(self.data_dir)!r}, {state})"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><code>{k}</code></td><td><code>{html.escape(v)}</code></td></tr>"
            for k, v in self.info.env().items()  # never the server key
        )
        state = "running" if self.alive() else "stopped"
        return (
            f"<div><b>opd serve</b> {state} at <code>{self.base_url}</code> "
            f"(data: <code>{html.escape(str(self.data_dir))}</code>)<table>{rows}</table></div>"
        )


# ---- launching -----------------------------------------------------------------------------------
def _command(options: ServeOptions, ready: str, *, detach: bool) -> list[str]:
    """The child's command line: the options whole, as JSON (nothing secret is in them)."""
    cmd = [
        sys.executable,
        "-m",
        "opd_nb.server",
        "--options",
        options.model_dump_json(),
        "--ready-file",
        ready,
    ]
    if not detach:  # a server started for a process (a demo, a test) ends with it, even after a SIGKILL
        cmd.append("--exit-with-parent")
    return cmd


def _child_env(api_key: str | None) -> dict[str, str]:
    """The server's environment: the key goes here (never on the command line, which `ps` shows)."""
    env = dict(os.environ)
    if api_key:
        env[API_KEY_ENV] = api_key
    return env


def _ready_path() -> str:
    """A fresh path (not yet a file) where the server writes its bound port once it listens."""
    fd, ready = tempfile.mkstemp(prefix="opd-serve-", suffix=".port")
    os.close(fd)
    os.unlink(ready)
    return ready


def _read_port(ready: str) -> int | None:
    try:
        port = int(Path(ready).read_text() or 0) or None
    except (OSError, ValueError):
        return None
    if port:
        os.unlink(ready)
    return port


def _log_tail(log_path: Path) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:])
    except OSError:
        return ""


def _wait_until_healthy(
    process: subprocess.Popen[bytes],
    host: str,
    data_dir: Path,
    log_path: Path,
    ready: str,
    timeout: float,
    api_key: str | None,
) -> ServerHandle | StartFailed | StartTimedOut:
    deadline = time.monotonic() + timeout
    port: int | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            Path(ready).unlink(missing_ok=True)
            return StartFailed(
                message=f"the local control plane exited at startup (code {process.returncode})",
                log_tail=_log_tail(log_path),
                exit_code=process.returncode,
            )
        port = port or _read_port(ready)
        if port:
            handle = ServerHandle(process, host, port, data_dir, log_path=log_path, api_key=api_key)
            if _healthy(handle.base_url, handle.key_required):
                return handle
        time.sleep(_POLL_S)
    process.kill()
    process.wait(5)
    Path(ready).unlink(missing_ok=True)
    return StartTimedOut(pid=process.pid, timeout_s=timeout, log_path=str(log_path))


def _launch(
    options: ServeOptions,
    *,
    api_key: str | None,
    startup_timeout: float,
    log_path: str | Path | None,
    detach: bool,
) -> ServerHandle | StartFailed | StartTimedOut:
    """Spawn ``python -m opd_nb.server`` and wait until it answers ``/health``."""
    data_dir = options.resolved_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    options = options.model_copy(update={"data_dir": str(data_dir)})
    log = Path(log_path) if log_path else data_dir / "server.log"
    ready = _ready_path()
    api_key = api_key or settings.SERVE_API_KEY.get()
    with open(log, "ab") as out:
        process = subprocess.Popen(
            _command(options, ready, detach=detach),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_child_env(api_key),
            start_new_session=detach,
        )
    return _wait_until_healthy(process, options.host, data_dir, log, ready, startup_timeout, api_key)


def _options(options: ServeOptions | None, settings: dict[str, Any], **defaults: Any) -> ServeOptions:
    """``options``, or one built from keyword settings (any :class:`ServeOptions` field), not both."""
    if options is None:
        return ServeOptions(**{**defaults, **settings})
    if settings:
        raise TypeError(f"pass ServeOptions or its fields, not both (got {sorted(settings)})")
    return options


def start(
    options: ServeOptions | None = None,
    *,
    startup_timeout: float = 60.0,
    log_path: str | Path | None = None,
    detach: bool = False,
    api_key: str | None = None,
    **settings: Any,
) -> ServerHandle:
    """Start the control plane in a background subprocess and wait until it answers `/health`.

    ``settings``: :class:`ServeOptions` fields instead of ``options`` (``port`` defaults to 0 here: a
    free one). A data dir another server owns is a start failure (that server's URL and pid in the message).
    """
    outcome = _launch(
        _options(options, settings, port=0),
        api_key=api_key,
        startup_timeout=startup_timeout,
        log_path=log_path,
        detach=detach,
    )
    if isinstance(outcome, StartFailed | StartTimedOut):
        raise outcome.to_error()
    return outcome


def _port_taken(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (a bind test: nothing is held after it)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def start_background(
    options: ServeOptions | None = None,
    *,
    startup_timeout: float = 60.0,
    api_key: str | None = None,
    **settings: Any,
) -> StartResult:
    """Reuse the server that already serves the options' data dir, if healthy; else launch one for it and
    record it. A server for another data dir is never reused: when it holds the default port, the new
    one takes a free port (as TensorBoard does). ``settings``: :class:`ServeOptions` fields instead of
    ``options``."""
    options = _options(options, settings)
    data_dir = options.resolved_data_dir()
    current = _alive(read_state(data_dir)) or data_dir_owner(data_dir)
    if current is not None:
        return StartReused(info=current)
    if options.port == LOCAL_PORT and _port_taken(options.host, options.port):
        options = options.model_copy(update={"port": 0})
    outcome = _launch(options, api_key=api_key, startup_timeout=startup_timeout, log_path=None, detach=True)
    if isinstance(outcome, StartFailed | StartTimedOut):
        return outcome
    write_state(outcome.info)
    _STARTED_HERE[data_dir] = outcome.info
    return StartLaunched(info=outcome.info)


def stop_background(
    timeout: float = 15.0, *, data_dir: str | Path | None = None, started_here_only: bool = False
) -> list[ServerInfo]:
    """Stop background servers and forget them; returns what was stopped (empty: nothing ran).

    ``data_dir`` given: the server that serves it, whoever started it. Else ``started_here_only`` (a
    notebook kernel): the servers this process started. Else (a terminal): the one running server, or,
    with several, the default data dir's.
    """
    if data_dir is not None:
        targets = [resolve_data_dir(data_dir)]
    elif started_here_only:
        targets = list(_STARTED_HERE)
    else:
        running = running_servers()
        targets = [resolve_data_dir(running[0].data_dir if len(running) == 1 else None)]
    stopped: list[ServerInfo] = []
    for target in targets:
        info = data_dir_owner(target) or read_state(target)
        _STARTED_HERE.pop(target, None)
        clear_state(target)
        if info is not None and _pid_alive(info.pid):
            ServerHandle.attach(info).stop(timeout)
            stopped.append(info)
    return stopped
