"""Start, find and stop the local control plane: one background server per user, kept in a state file.

Modelled on TensorBoard's ``manager.py``. A running server is described by a frozen
:class:`ServerInfo`, whose fields are the state file's keys (declared once, written and read back
with type checks). :func:`start_background` answers with a typed result, :class:`StartReused`,
:class:`StartLaunched`, :class:`StartFailed` or :class:`StartTimedOut`, and front ends (`opd serve
start`, ``%opd serve start``) branch on its type. :func:`start` is the plain launcher that tests,
the demo and the bench use: it returns a :class:`ServerHandle` (also a context manager) or raises
an :class:`~opd_nb.errors.OpdError`. Importing this module is light: no FastAPI, and httpx only
once a server is polled.

One server owns a data dir: it holds ``<data_dir>/server.lock`` (:class:`DataDirLock`, a ``filelock``
released by the kernel even on SIGKILL) and describes itself in ``<data_dir>/server.json``, so a
second server is refused with the owner's URL and pid, and :func:`start_background` reuses the owner.
A server key (``--api-key`` or ``OPD_SERVE_API_KEY``) travels to the child in its environment,
never on its command line, and no record holds it: :class:`ServerInfo` only says that one is needed.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any, get_type_hints

from opd_nb.constants import API_PATH, LOCAL_API_KEY, LOCAL_HOST, LOCAL_PORT
from opd_nb.errors import OpdError

_LOG_TAIL_LINES = 10
_POLL_S = 0.1
API_KEY_ENV = "OPD_SERVE_API_KEY"  # the server key; the only way it reaches a launched server
LOCK_FILE = "server.lock"
OWNER_FILE = "server.json"
MAX_INTERRUPTIONS = 3  # a job interrupted this many times (server restarts) fails instead of resuming
MAX_DEPLOYMENTS_ENV = "OPD_MAX_DEPLOYMENTS"  # or `opd serve --max-deployments`
CHECKPOINT_TTL_ENV = "OPD_CHECKPOINT_TTL_DAYS"  # or `opd serve --checkpoint-ttl-days`
DEFAULT_CHECKPOINT_TTL_DAYS = 15.0  # Bailian's documented example: expire_time is 15 days after create_time
DEFAULT_MAX_DEPLOYMENTS = 3


def default_data_dir() -> Path:
    """``$OPD_DATA_DIR``, else ``$XDG_CACHE_HOME/opd-nb/server`` (``~/.cache/opd-nb/server``)."""
    if os.environ.get("OPD_DATA_DIR"):
        return Path(os.environ["OPD_DATA_DIR"]).expanduser()
    return _cache_dir() / "server"


def state_file() -> Path:
    """Where the background server started by `opd serve start` is recorded (for `stop`/`status`)."""
    return _cache_dir() / "serve-state.json"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opd-nb"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine (``localhost``, 127.0.0.0/8, ::1)."""
    import ipaddress

    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    import socket

    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(name, None)}
    except (OSError, UnicodeError):
        return False
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def server_urls(host: str, port: int) -> tuple[str, str]:
    """(base URL, API base) a client uses for a server listening on ``host:port``."""
    shown = LOCAL_HOST if host in ("0.0.0.0", "", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    base_url = f"http://{shown}:{port}"
    return base_url, base_url + API_PATH


@dataclass(frozen=True)
class ServerInfo:
    """A launched control plane, as recorded in the state file."""

    pid: int
    host: str
    port: int
    base_url: str
    api_base: str
    data_dir: str
    log_path: str = ""
    key_required: bool = False  # started with a server key (the key itself is never recorded)

    @classmethod
    def at(
        cls,
        pid: int,
        host: str,
        port: int,
        data_dir: str | Path,
        log_path: str | Path = "",
        key_required: bool = False,
    ) -> ServerInfo:
        base_url, api_base = server_urls(host, port)
        return cls(pid, host, port, base_url, api_base, str(data_dir), str(log_path), key_required)

    def env(self) -> dict[str, str]:
        """The variables a workspace (and the dashscope SDK) needs to target this server.

        With a server key there is no key to give: the caller sets ``DASHSCOPE_API_KEY`` to it.
        """
        if self.key_required:
            return {"DASHSCOPE_HTTP_BASE_URL": self.api_base}
        return {"DASHSCOPE_HTTP_BASE_URL": self.api_base, "DASHSCOPE_API_KEY": LOCAL_API_KEY}

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ServerInfo | None:
        """The record in ``text``, or None when it is not one (garbled, a field missing or mistyped)."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        values: dict[str, Any] = {}
        for field in fields(cls):
            if field.name not in data:
                if field.default is MISSING:
                    return None
                continue
            value, kind = data[field.name], _FIELD_TYPES[field.name]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                return None
            values[field.name] = value
        return cls(**values)


_FIELD_TYPES: dict[str, type] = get_type_hints(ServerInfo)


def read_state() -> ServerInfo | None:
    """The recorded background server (alive or not), or None."""
    try:
        return ServerInfo.from_json(state_file().read_text())
    except OSError:
        return None


def write_state(info: ServerInfo) -> None:
    """Record ``info`` as the one background server (atomically: a reader never sees half a file)."""
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(info.to_json())
    os.replace(tmp, path)


def clear_state() -> None:
    state_file().unlink(missing_ok=True)


# ---- one owner per data dir --------------------------------------------------------------------
class DataDirLock:
    """The running server's hold on its data dir (``filelock``; the kernel drops it if the server dies)."""

    def __init__(self, data_dir: str | Path):
        from filelock import FileLock

        self.path = Path(data_dir) / LOCK_FILE
        self._lock = FileLock(str(self.path))

    def acquire(self) -> bool:
        """Take the lock now, or answer False if another process holds it."""
        from filelock import Timeout

        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            return False
        return True

    def release(self) -> None:
        self._lock.release()


def owner_file(data_dir: str | Path) -> Path:
    return Path(data_dir) / OWNER_FILE


def read_owner(data_dir: str | Path) -> ServerInfo | None:
    """The server recorded as serving ``data_dir`` (alive or not), or None."""
    try:
        return ServerInfo.from_json(owner_file(data_dir).read_text())
    except OSError:
        return None


def write_owner(info: ServerInfo) -> None:
    path = owner_file(info.data_dir)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(info.to_json())
    os.replace(tmp, path)


def clear_owner(data_dir: str | Path, pid: int) -> None:
    """Forget the owner record if it is ``pid``'s (a newer owner's record stays)."""
    info = read_owner(data_dir)
    if info is not None and info.pid == pid:
        owner_file(data_dir).unlink(missing_ok=True)


def data_dir_owner(data_dir: str | Path) -> ServerInfo | None:
    """The live, answering server that owns ``data_dir``, or None."""
    info = read_owner(Path(data_dir).expanduser().resolve())
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


# ---- typed answers of start_background ---------------------------------------------------------
@dataclass(frozen=True)
class StartReused:
    """A healthy server was already recorded; nothing was started."""

    info: ServerInfo


@dataclass(frozen=True)
class StartLaunched:
    """A new background server answers ``/health`` and is recorded in the state file."""

    info: ServerInfo


@dataclass(frozen=True)
class StartFailed:
    """The server process exited during startup (e.g. the port is taken): its exit code and log tail."""

    message: str
    log_tail: str
    exit_code: int | None

    def to_error(self) -> OpdError:
        return OpdError(
            f"{self.message}:\n{self.log_tail}",
            fix="see the message above; `opd serve status` shows a server already running",
        )


@dataclass(frozen=True)
class StartTimedOut:
    """The server did not answer ``/health`` in time and was killed."""

    pid: int
    timeout_s: float
    log_path: str

    def to_error(self) -> OpdError:
        return OpdError(
            f"the local control plane did not start within {self.timeout_s:.0f}s (log: {self.log_path})"
        )


StartResult = StartReused | StartLaunched | StartFailed | StartTimedOut


@dataclass(frozen=True)
class ServerStatus:
    """What the state file records and whether that server is alive and answering."""

    recorded: ServerInfo | None
    running: bool


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
        code = httpx.get(base_url + "/health", timeout=2.0, trust_env=False).status_code
    except httpx.HTTPError:
        return False
    return code == 200 or (key_required and code == 401)


def _is_running(info: ServerInfo) -> bool:
    return _pid_alive(info.pid) and _healthy(info.base_url, info.key_required)


def running_server() -> ServerInfo | None:
    """The recorded background server if it is alive and answers ``/health``, else None."""
    info = read_state()
    return info if info is not None and _is_running(info) else None


def server_status() -> ServerStatus:
    recorded = read_state()
    return ServerStatus(recorded, recorded is not None and _is_running(recorded))


class ServerHandle:
    """A running local control plane (background subprocess)."""

    def __init__(
        self,
        process: subprocess.Popen | None,
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
        """The two variables a workspace (and the dashscope SDK) needs to target this server.

        With a server key this holds the key, if this handle started the server with it.
        """
        env = self.info.env()
        if self._api_key:
            env["DASHSCOPE_API_KEY"] = self._api_key
        return env

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return _pid_alive(self.pid)

    def stop(self, timeout: float = 15.0, sig: int = signal.SIGINT) -> None:
        """Stop the server (SIGINT, or ``sig``): a running job is interrupted and resumes at the next start."""
        if not self.alive():
            return
        if self.process is not None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            return
        os.kill(self.pid, sig)  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            time.sleep(_POLL_S)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)  # type: ignore[arg-type]

    def kill(self) -> None:
        """SIGKILL the server (tests of crash recovery)."""
        if self.pid and self.alive():
            os.kill(self.pid, signal.SIGKILL)
            if self.process is not None:
                self.process.wait(5)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self.info)

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
@dataclass(frozen=True)
class ServeOptions:
    """How a launched server runs its jobs (everything but where it listens and its key)."""

    model_map: dict[str, str] = dataclasses.field(default_factory=dict)
    max_running: int = 1
    resume: bool = True  # resume interrupted jobs at startup (False: the old FAILED ServerRestarted)
    max_interruptions: int = MAX_INTERRUPTIONS
    max_deployments: int | None = None  # None: $OPD_MAX_DEPLOYMENTS, else DEFAULT_MAX_DEPLOYMENTS


def _command(
    host: str, port: int, data_dir: Path, options: ServeOptions, ready: str, *, detach: bool
) -> list[str]:
    cmd = [sys.executable, "-m", "opd_nb.server", "--host", host, "--port", str(port)]
    if not detach:  # a server started for a process (a demo, a test) ends with it, even after a SIGKILL
        cmd.append("--exit-with-parent")
    cmd += ["--data-dir", str(data_dir), "--ready-file", ready, "--max-running", str(options.max_running)]
    cmd += ["--max-interruptions", str(options.max_interruptions)]
    if options.max_deployments is not None:
        cmd += ["--max-deployments", str(options.max_deployments)]
    if not options.resume:
        cmd.append("--no-resume")
    for key, value in options.model_map.items():
        cmd += ["--model-map", f"{key}={value}"]
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
    process: subprocess.Popen,
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
                f"the local control plane exited at startup (code {process.returncode})",
                _log_tail(log_path),
                process.returncode,
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
    return StartTimedOut(process.pid, timeout, str(log_path))


def _resolve_dir(data_dir: str | Path | None) -> Path:
    return Path(data_dir).expanduser().resolve() if data_dir else default_data_dir().resolve()


def _launch(
    host: str,
    port: int,
    data_dir: str | Path | None,
    options: ServeOptions,
    *,
    api_key: str | None,
    startup_timeout: float,
    log_path: str | Path | None,
    detach: bool,
) -> ServerHandle | StartFailed | StartTimedOut:
    """Spawn ``python -m opd_nb.server`` and wait until it answers ``/health``."""
    data_dir = _resolve_dir(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    log = Path(log_path) if log_path else data_dir / "server.log"
    ready = _ready_path()
    api_key = api_key or os.environ.get(API_KEY_ENV) or None
    with open(log, "ab") as out:
        process = subprocess.Popen(
            _command(host, port, data_dir, options, ready, detach=detach),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_child_env(api_key),
            start_new_session=detach,
        )
    return _wait_until_healthy(process, host, data_dir, log, ready, startup_timeout, api_key)


def start(
    host: str = LOCAL_HOST,
    port: int = 0,
    data_dir: str | Path | None = None,
    model_map: dict[str, str] | None = None,
    *,
    max_running: int = 1,
    startup_timeout: float = 60.0,
    log_path: str | Path | None = None,
    detach: bool = False,
    api_key: str | None = None,
    resume: bool = True,
    max_interruptions: int = MAX_INTERRUPTIONS,
    max_deployments: int | None = None,
) -> ServerHandle:
    """Start the control plane in a background subprocess and wait until it answers `/health`.

    A data dir another server owns is a start failure (that server's URL and pid in the message).
    """
    outcome = _launch(
        host,
        port,
        data_dir,
        ServeOptions(dict(model_map or {}), max_running, resume, max_interruptions, max_deployments),
        api_key=api_key,
        startup_timeout=startup_timeout,
        log_path=log_path,
        detach=detach,
    )
    if isinstance(outcome, StartFailed | StartTimedOut):
        raise outcome.to_error()
    return outcome


def start_background(
    host: str = LOCAL_HOST,
    port: int = LOCAL_PORT,
    data_dir: str | Path | None = None,
    model_map: dict[str, str] | None = None,
    *,
    max_running: int = 1,
    startup_timeout: float = 60.0,
    api_key: str | None = None,
    resume: bool = True,
    max_interruptions: int = MAX_INTERRUPTIONS,
    max_deployments: int | None = None,
) -> StartResult:
    """Reuse the recorded server, or the one that owns ``data_dir``, if healthy; else launch one and record it."""
    current = running_server() or data_dir_owner(_resolve_dir(data_dir))
    if current is not None:
        return StartReused(current)
    outcome = _launch(
        host,
        port,
        data_dir,
        ServeOptions(dict(model_map or {}), max_running, resume, max_interruptions, max_deployments),
        api_key=api_key,
        startup_timeout=startup_timeout,
        log_path=None,
        detach=True,
    )
    if isinstance(outcome, StartFailed | StartTimedOut):
        return outcome
    write_state(outcome.info)
    return StartLaunched(outcome.info)


def stop_background(timeout: float = 15.0) -> ServerInfo | None:
    """Stop the recorded server and forget it; returns what was stopped (None: nothing was running)."""
    info = read_state()
    if info is None or not _pid_alive(info.pid):
        clear_state()
        return None
    ServerHandle.attach(info).stop(timeout)
    clear_state()
    return info
