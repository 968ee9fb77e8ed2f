"""The state of a local control plane, as records: what runs where, who owns a data dir, how it runs.

Split from :mod:`opd_nb.server.lifecycle` (which starts, finds and stops servers). A running server is
described by a frozen :class:`ServerInfo`, whose fields are the state file's and ``server.json``'s keys
(declared once, written and read back strictly typed); :class:`ServeOptions` is everything a server
runs with, built once by the front end and passed whole to the launched process (as JSON) and to
:func:`opd_nb.server.app.create_app`. No record holds the server key: it travels in the environment.
Importing this module is light (no FastAPI, no httpx).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from opd_nb import settings
from opd_nb.constants import API_PATH, LOCAL_API_KEY, LOCAL_HOST, LOCAL_PORT
from opd_nb.errors import OpdError

API_KEY_ENV = settings.SERVE_API_KEY.name  # the server key; the only way it reaches a launched server
LOCK_FILE = "server.lock"
OWNER_FILE = "server.json"
MAX_INTERRUPTIONS = 3  # a job interrupted this many times (server restarts) fails instead of resuming
MAX_DEPLOYMENTS_ENV = settings.MAX_DEPLOYMENTS.name  # or `opd serve --max-deployments`
CHECKPOINT_TTL_ENV = settings.CHECKPOINT_TTL_DAYS.name  # or `opd serve --checkpoint-ttl-days`
DEFAULT_CHECKPOINT_TTL_DAYS: float = settings.CHECKPOINT_TTL_DAYS.default or 0.0
DEFAULT_MAX_DEPLOYMENTS: int = settings.MAX_DEPLOYMENTS.default or 1


class ServeOptions(BaseModel):
    """How one control plane runs: where it listens, its data dir, its models and its job policy.

    Built once (by `opd serve`, or by :func:`opd_nb.server.start` from its keywords) and passed whole:
    to the launched process as JSON, then to ``create_app``/``build_services``. A new option is a field
    here, its flag in `opd serve`, and the code that uses it. The server key is not an option (it
    would be serialized): it travels in ``$OPD_SERVE_API_KEY``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = LOCAL_HOST
    port: int = LOCAL_PORT  # 0 picks a free one
    data_dir: str | None = None  # None: default_data_dir()
    model_map: dict[str, str] = Field(default_factory=dict)  # model id -> local Hugging Face directory
    max_running: int = 1
    resume: bool = True  # resume interrupted jobs at startup (False: the old FAILED ServerRestarted)
    max_interruptions: int = MAX_INTERRUPTIONS
    max_deployments: int | None = None  # None: $OPD_MAX_DEPLOYMENTS, else DEFAULT_MAX_DEPLOYMENTS
    checkpoint_ttl_days: float | None = None  # None: $OPD_CHECKPOINT_TTL_DAYS, else 15
    log_level: str = "warning"
    otlp_forward: str | None = None  # also send the jobs' spans to this OTLP/HTTP collector (headers: env)

    @field_validator("data_dir", mode="before")
    @classmethod
    def _path_as_text(cls, value: object) -> object:
        return os.fspath(cast("os.PathLike[str]", value)) if isinstance(value, os.PathLike) else value

    @field_validator("model_map", mode="before")
    @classmethod
    def _paths_as_text(cls, value: object) -> object:
        if isinstance(value, dict):
            given = cast(dict[object, object], value)  # a mapping of anything: pydantic checks it next
            return {
                k: os.fspath(cast("os.PathLike[str]", v)) if isinstance(v, os.PathLike) else v
                for k, v in given.items()
            }
        return value

    @field_validator("max_interruptions", "max_deployments")
    @classmethod
    def _at_least_one(cls, value: int | None) -> int | None:
        return None if value is None else max(1, value)

    @field_validator("checkpoint_ttl_days")
    @classmethod
    def _not_negative(cls, value: float | None) -> float | None:
        return None if value is None else max(0.0, value)

    def resolved_data_dir(self) -> Path:
        return resolve_data_dir(self.data_dir)


def parse_model_map(items: list[str] | None) -> dict[str, str]:
    """``--model-map ID=PATH`` (repeatable) as ``{id: resolved path}``; each PATH a Hugging Face directory."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise OpdError(
                f"--model-map {item!r} must look like ID=PATH", fix="e.g. --model-map qwen3-8b=/models/q8"
            )
        path = Path(value.strip()).expanduser()
        if not (path / "config.json").is_file():
            raise OpdError(
                f"--model-map {key}: {path} is not a Hugging Face model directory (no config.json)"
            )
        out[key.strip()] = str(path.resolve())
    return out


def default_data_dir() -> Path:
    """``$OPD_DATA_DIR``, else ``$XDG_CACHE_HOME/opd-nb/server`` (``~/.cache/opd-nb/server``)."""
    return settings.DATA_DIR.get() or _cache_dir() / "server"


def state_dir() -> Path:
    """Where `opd serve start` records its background servers: one record per data dir (for `stop`/`status`),
    as TensorBoard's manager keeps one info file per server."""
    return _cache_dir() / "serve-state"


def legacy_state_file() -> Path:
    """The single record an earlier version kept (read, so its server can still be found and stopped)."""
    return _cache_dir() / "serve-state.json"


def resolve_data_dir(data_dir: str | Path | None) -> Path:
    """The one absolute form of a data dir (None: the default), which records are keyed by."""
    return Path(data_dir).expanduser().resolve() if data_dir else default_data_dir().resolve()


def state_file(data_dir: str | Path | None = None) -> Path:
    """The record of the background server for ``data_dir`` (None: the default data dir)."""
    key = hashlib.sha256(str(resolve_data_dir(data_dir)).encode("utf-8")).hexdigest()[:16]
    return state_dir() / f"{key}.json"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opd-nb"


def server_urls(host: str, port: int) -> tuple[str, str]:
    """(base URL, API base) a client uses for a server listening on ``host:port``."""
    shown = LOCAL_HOST if host in ("0.0.0.0", "", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    base_url = f"http://{shown}:{port}"
    return base_url, base_url + API_PATH


class ServerInfo(BaseModel):
    """A launched control plane, as recorded in the state file (strict: a mistyped field is no record)."""

    model_config = ConfigDict(frozen=True, strict=True)

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
        return cls(
            pid=pid,
            host=host,
            port=port,
            base_url=base_url,
            api_base=api_base,
            data_dir=str(data_dir),
            log_path=str(log_path),
            key_required=key_required,
        )

    def env(self) -> dict[str, str]:
        """The variables a workspace (and the dashscope SDK) needs to target this server.

        With a server key there is no key to give: the caller sets ``OPD_SERVE_API_KEY`` to it (`opd` and
        `submit_job.py --local` send a local plane that key, never the cloud's ``DASHSCOPE_API_KEY``).
        """
        if self.key_required:
            return {"DASHSCOPE_HTTP_BASE_URL": self.api_base}
        return {"DASHSCOPE_HTTP_BASE_URL": self.api_base, "DASHSCOPE_API_KEY": LOCAL_API_KEY}

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> ServerInfo | None:
        """The record in ``text``, or None when it is not one (garbled, a field missing or mistyped)."""
        try:
            return cls.model_validate_json(text)
        except ValidationError:
            return None


def _read_record(path: Path) -> ServerInfo | None:
    try:
        return ServerInfo.from_json(path.read_text())
    except OSError:
        return None


def read_state(data_dir: str | Path | None = None) -> ServerInfo | None:
    """The recorded background server for ``data_dir`` (None: the default data dir), alive or not."""
    info = _read_record(state_file(data_dir))
    if info is not None:
        return info
    legacy = _read_record(legacy_state_file())
    return (
        legacy
        if legacy is not None and resolve_data_dir(legacy.data_dir) == resolve_data_dir(data_dir)
        else None
    )


def read_states() -> list[ServerInfo]:
    """Every recorded background server (alive or not), newest record first; one per data dir."""
    paths = sorted(state_dir().glob("*.json"), key=_mtime, reverse=True) + [legacy_state_file()]
    out: dict[Path, ServerInfo] = {}
    for path in paths:
        info = _read_record(path)
        if info is not None:
            out.setdefault(resolve_data_dir(info.data_dir), info)
    return list(out.values())


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def write_state(info: ServerInfo) -> None:
    """Record ``info`` as its data dir's background server (atomically: a reader never sees half a file)."""
    path = state_file(info.data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(info.to_json())
    os.replace(tmp, path)


def clear_state(data_dir: str | Path | None = None) -> None:
    """Forget the record of ``data_dir``'s server (and an earlier version's single record, if it was that one)."""
    state_file(data_dir).unlink(missing_ok=True)
    legacy = _read_record(legacy_state_file())
    if legacy is None or resolve_data_dir(legacy.data_dir) == resolve_data_dir(data_dir):
        legacy_state_file().unlink(missing_ok=True)


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


# ---- typed answers of start_background ---------------------------------------------------------
class StartReused(BaseModel):
    """A healthy server was already recorded; nothing was started."""

    model_config = ConfigDict(frozen=True)

    info: ServerInfo


class StartLaunched(BaseModel):
    """A new background server answers ``/health`` and is recorded in the state file."""

    model_config = ConfigDict(frozen=True)

    info: ServerInfo


class StartFailed(BaseModel):
    """The server process exited during startup (e.g. the port is taken): its exit code and log tail."""

    model_config = ConfigDict(frozen=True)

    message: str
    log_tail: str
    exit_code: int | None

    def to_error(self) -> OpdError:
        return OpdError(
            f"{self.message}:\n{self.log_tail}",
            fix="see the message above; `opd serve status` shows a server already running",
        )


class StartTimedOut(BaseModel):
    """The server did not answer ``/health`` in time and was killed."""

    model_config = ConfigDict(frozen=True)

    pid: int
    timeout_s: float
    log_path: str

    def to_error(self) -> OpdError:
        return OpdError(
            f"the local control plane did not start within {self.timeout_s:.0f}s (log: {self.log_path})"
        )


StartResult = StartReused | StartLaunched | StartFailed | StartTimedOut


class ServerStatus(BaseModel):
    """What the state file records and whether that server is alive and answering."""

    model_config = ConfigDict(frozen=True)

    recorded: ServerInfo | None
    running: bool
