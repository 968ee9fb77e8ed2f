"""`opd serve [run|start|stop|status]`: the local Bailian-compatible control plane."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel

from opd_nb.cli._app import app
from opd_nb.cli._output import emit, in_magic
from opd_nb.errors import OpdError

ACTIONS = ("run", "start", "stop", "status")


class ServeInfo(BaseModel):
    """Where a local control plane runs and the two variables a workspace needs to target it."""

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    running: bool
    base_url: str | None = None
    api_base: str | None = None
    pid: int | None = None
    data_dir: str | None = None
    note: str = ""

    def env(self) -> dict[str, str]:
        return (
            {"DASHSCOPE_HTTP_BASE_URL": self.api_base or "", "DASHSCOPE_API_KEY": "local"}
            if self.api_base
            else {}
        )

    def __str__(self) -> str:
        if not self.running:
            return f"opd serve: not running{'; ' + self.note if self.note else ''}"
        lines = [f"opd serve: running at {self.base_url} (pid {self.pid}, data {self.data_dir})"]
        if self.note:
            lines.append(self.note)
        lines.append("target it from a workspace with:")
        lines += [f"  export {k}={v}" for k, v in self.env().items()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

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


def _parse_map(items: list[str] | None) -> dict[str, str]:
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


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _healthy(base_url: str) -> bool:
    import httpx

    try:
        return httpx.get(base_url + "/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def status_info() -> ServeInfo:
    from opd_nb.server import read_state

    state = read_state()
    if not state:
        return ServeInfo(
            running=False, note="no background server recorded (start one with `opd serve start`)"
        )
    if not _alive(state.get("pid")) or not _healthy(state["base_url"]):
        return ServeInfo(running=False, note=f"the recorded server (pid {state.get('pid')}) is gone")
    return ServeInfo(running=True, **{k: state.get(k) for k in ("base_url", "api_base", "pid", "data_dir")})


def start_background(host: str, port: int, data_dir: str | None, model_map: dict[str, str]) -> ServeInfo:
    from opd_nb.server import start, state_file

    current = status_info()
    if current.running:
        current.note = "already running"
        return current
    handle = start(host=host, port=port, data_dir=data_dir, model_map=model_map, detach=True)
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(handle.to_dict()))
    return ServeInfo(
        running=True,
        base_url=handle.base_url,
        api_base=handle.api_base,
        pid=handle.pid,
        data_dir=str(handle.data_dir),
    )


def stop_background() -> ServeInfo:
    from opd_nb.server import ServerHandle, read_state, state_file

    state = read_state()
    if not state or not _alive(state.get("pid")):
        state_file().unlink(missing_ok=True)
        return ServeInfo(running=False, note="nothing to stop")
    ServerHandle(None, state["host"], state["port"], Path(state["data_dir"]), pid=state["pid"]).stop()
    state_file().unlink(missing_ok=True)
    return ServeInfo(running=False, note=f"stopped the server at {state['base_url']}")


@app.command("serve")
def serve(
    action: Annotated[
        str | None,
        typer.Argument(
            help="run (foreground; CLI default) | start (background; magic default) | stop | status"
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (0 picks a free one)")] = 8765,
    data_dir: Annotated[
        str | None,
        typer.Option(
            help="where jobs, files and checkpoints live (default ~/.cache/opd-nb/server or $OPD_DATA_DIR)"
        ),
    ] = None,
    model_map: Annotated[
        list[str] | None,
        typer.Option(
            "--model-map", help="ID=PATH: run model ID on a local Hugging Face directory (repeatable)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> Any:
    """Run the local Bailian-compatible control plane that the unmodified dashscope SDK talks to."""
    action = action or ("start" if in_magic() else "run")
    if action not in ACTIONS:
        raise OpdError(f"unknown action {action!r}", fix=f"use one of: {', '.join(ACTIONS)}")
    mapping = _parse_map(model_map)
    if action == "start":
        info = start_background(host, port, data_dir, mapping)
        return emit(info, as_json=as_json)
    if action == "stop":
        return emit(stop_background(), as_json=as_json)
    if action == "status":
        info = status_info()
        return emit(info, exit_code=0 if info.running else 1, as_json=as_json)
    # run: foreground until Ctrl-C
    from opd_nb.server import default_data_dir
    from opd_nb.server.__main__ import main as serve_main

    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    api = f"http://{shown}:{port}/api/v1"
    typer.echo(
        f"opd serve: local control plane on http://{shown}:{port} "
        f"(data {data_dir or default_data_dir()}); Ctrl-C stops it"
    )
    typer.echo("target it from a workspace (before importing dashscope) with:")
    typer.echo(f"  export DASHSCOPE_HTTP_BASE_URL={api}")
    typer.echo("  export DASHSCOPE_API_KEY=local")
    argv = ["--host", host, "--port", str(port), "--log-level", "warning"]
    if data_dir:
        argv += ["--data-dir", data_dir]
    for key, value in mapping.items():
        argv += ["--model-map", f"{key}={value}"]
    rc = serve_main(argv)
    if rc:
        raise OpdError(f"cannot listen on {host}:{port}", fix="pick another --port", exit_code=rc)
    return None
