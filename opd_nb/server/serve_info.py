"""The local control plane's state as every front end reports it (`opd serve start|stop|status`, the
agent's ``serve_*`` tools): one model and three calls over :mod:`opd_nb.server.lifecycle`, so the CLI and
`opd mcp` answer the same. The server key is never part of it, only whether one is needed.
"""

from __future__ import annotations

from pydantic import BaseModel

from opd_nb.constants import LOCAL_API_KEY, LOCAL_PORT
from opd_nb.errors import OpdError
from opd_nb.loopback import binds_loopback_only
from opd_nb.results import ResultMixin
from opd_nb.server.lifecycle import running_servers, server_status, start_background, stop_background
from opd_nb.server.records import (
    API_KEY_ENV,
    ServeOptions,
    ServerInfo,
    StartLaunched,
    StartReused,
)
from opd_nb.server.runner import open_warning, refuse_open_bind
from opd_nb.views import render
from opd_nb.views.render import esc

SERVER_KEY_HINT = "<the server key opd serve was started with>"


class ServeInfo(ResultMixin, BaseModel):
    """Where a local control plane runs and the two variables a workspace needs to target it."""

    running: bool
    base_url: str | None = None
    api_base: str | None = None
    pid: int | None = None
    data_dir: str | None = None
    host: str | None = None
    key_required: bool = False
    note: str = ""
    stopped: bool = False  # an `opd serve stop` that stopped something (the note says what)

    @classmethod
    def of(cls, info: ServerInfo, note: str = "") -> ServeInfo:
        return cls(
            running=True,
            base_url=info.base_url,
            api_base=info.api_base,
            pid=info.pid,
            data_dir=info.data_dir,
            host=info.host,
            key_required=info.key_required,
            note=note,
        )

    @property
    def _headline(self) -> str:
        return "stopped" if self.stopped else "not running"

    def env(self) -> dict[str, str]:
        if not self.api_base:
            return {}
        if self.key_required:  # the SDK in a script of yours sends DASHSCOPE_API_KEY; `opd` and
            # submit_job.py --local send a local plane OPD_SERVE_API_KEY (never the cloud key)
            keys = dict.fromkeys(("DASHSCOPE_API_KEY", API_KEY_ENV), SERVER_KEY_HINT)
            return {"DASHSCOPE_HTTP_BASE_URL": self.api_base, **keys}
        return {"DASHSCOPE_HTTP_BASE_URL": self.api_base, "DASHSCOPE_API_KEY": LOCAL_API_KEY}

    def __str__(self) -> str:
        if not self.running:
            joint = " " if self.stopped else "; "
            return f"opd serve: {self._headline}{joint + self.note if self.note else ''}"
        lines = [f"opd serve: running at {self.base_url} (pid {self.pid}, data {self.data_dir})"]
        if self.host and not binds_loopback_only(self.host):
            lines.append(open_warning(self.host))
        if self.note:
            lines.append(self.note)
        lines.append("target it from a workspace with:")
        lines += [f"  export {k}={v}" for k, v in self.env().items()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        if not self.running:
            return render.box(esc(self.note), title=f"opd serve: {self._headline}")
        rows = [(f"<code>{esc(k)}</code>", f"<code>{esc(v)}</code>") for k, v in self.env().items()]
        where = f"running at {self.base_url} (pid {self.pid}, data {self.data_dir})"
        note = f"<div><small>{esc(self.note)}</small></div>" if self.note else ""
        return render.box(
            note + render.table(["variable", "value"], rows, raw_cols=(0, 1)), title=f"opd serve: {where}"
        )


def start_info(options: ServeOptions, api_key: str | None = None) -> ServeInfo:
    """`opd serve start`: reuse or launch the background server; a failed start is an OpdError."""
    refusal = refuse_open_bind(options.host, api_key)
    if refusal:
        raise OpdError(refusal.removeprefix("error: "), exit_code=2)
    result = start_background(options, api_key=api_key)
    match result:
        case StartReused(info=info):
            return ServeInfo.of(info, note="already running")
        case StartLaunched(info=info):
            moved = options.port == LOCAL_PORT and info.port != LOCAL_PORT
            return ServeInfo.of(
                info, note=f"port {LOCAL_PORT} is taken; listening on {info.port}" if moved else ""
            )
        case _:  # StartFailed | StartTimedOut
            raise result.to_error()


def stop_info(data_dir: str | None = None, *, kernel: bool = False) -> ServeInfo:
    """`opd serve stop`: ``--data-dir``'s server; else, in a notebook, what this kernel started (another
    notebook's server is not its to stop); else, in a terminal or an agent, the one running (of several,
    the default data dir's)."""
    stopped = stop_background(data_dir=data_dir, started_here_only=kernel and data_dir is None)
    if stopped:
        where = ", ".join(f"{info.base_url} (data {info.data_dir})" for info in stopped)
        return ServeInfo(running=False, stopped=True, note=f"the server at {where}")
    return ServeInfo(running=False, note="nothing to stop" + _others_note(kernel and data_dir is None))


def _others_note(kernel: bool) -> str:
    """Which servers still run, and how to stop one (a kernel stops only what it started)."""
    others = running_servers()
    if not others:
        return ""
    whom = "this kernel started no server; " if kernel else ""
    listed = "; ".join(f"{info.base_url} for {info.data_dir}" for info in others)
    return f" ({whom}running: {listed} — stop one with `opd serve stop --data-dir DIR`)"


def status_info(data_dir: str | None = None) -> ServeInfo:
    status = server_status(data_dir)
    if status.running and status.recorded is not None:
        return ServeInfo.of(status.recorded)
    if status.recorded is None:
        return ServeInfo(
            running=False, note="no background server recorded (start one with `opd serve start`)"
        )
    return ServeInfo(running=False, note=f"the recorded server (pid {status.recorded.pid}) is gone")
