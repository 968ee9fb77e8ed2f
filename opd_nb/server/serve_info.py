"""The local control plane's state as every front end reports it (`opd serve start|stop|status`, the
agent's ``serve_*`` tools): one model and three calls over :mod:`opd_nb.server.lifecycle`, so the CLI and
`opd mcp` answer the same. The server key is never part of it, only whether one is needed.
"""

from __future__ import annotations

import html

from pydantic import BaseModel

from opd_nb.constants import LOCAL_API_KEY
from opd_nb.errors import OpdError
from opd_nb.loopback import binds_loopback_only
from opd_nb.results import ResultMixin
from opd_nb.server.lifecycle import server_status, start_background, stop_background
from opd_nb.server.records import (
    API_KEY_ENV,
    ServeOptions,
    ServerInfo,
    StartLaunched,
    StartReused,
)
from opd_nb.server.runner import open_warning, refuse_open_bind

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
            return f"opd serve: not running{'; ' + self.note if self.note else ''}"
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
            return f"<div><b>opd serve</b>: not running {html.escape(self.note)}</div>"
        rows = "".join(
            f"<tr><td><code>{k}</code></td><td><code>{html.escape(v)}</code></td></tr>"
            for k, v in self.env().items()
        )
        return (
            f"<div><b>opd serve</b> running at <code>{html.escape(self.base_url or '')}</code> "
            f"(pid {self.pid})<table>{rows}</table></div>"
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
            return ServeInfo.of(info)
        case _:  # StartFailed | StartTimedOut
            raise result.to_error()


def stop_info() -> ServeInfo:
    stopped = stop_background()
    if stopped is None:
        return ServeInfo(running=False, note="nothing to stop")
    return ServeInfo(running=False, note=f"stopped the server at {stopped.base_url}")


def status_info() -> ServeInfo:
    status = server_status()
    if status.running and status.recorded is not None:
        return ServeInfo.of(status.recorded)
    if status.recorded is None:
        return ServeInfo(
            running=False, note="no background server recorded (start one with `opd serve start`)"
        )
    return ServeInfo(running=False, note=f"the recorded server (pid {status.recorded.pid}) is gone")
