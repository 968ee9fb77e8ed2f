"""`opd test` and `opd use` commands (registered on the shared app)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

import typer
from pydantic import BaseModel

from opd_nb.cli._app import app
from opd_nb.cli._output import emit, in_magic
from opd_nb.errors import OpdError

DEFAULT_LOCAL_API = "http://127.0.0.1:8765/api/v1"
DEFAULT_CLOUD_API = "https://dashscope.aliyuncs.com/api/v1"
_LOCAL_KEY_MARK = "OPD_NB_LOCAL_KEY"  # set when `use local` supplied the placeholder key itself


@app.command("test")
def test_cmd(
    workspace: Annotated[Path, typer.Argument(help="Workspace folder (default: current folder).")] = Path(
        "."
    ),
    pytest_args: Annotated[
        list[str] | None, typer.Option("--pytest-arg", "-a", help="Extra pytest argument (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
):
    """Run the workspace's tests (pytest in a fresh subprocess) and show a results table."""
    from opd_nb.testing import run_workspace_tests

    report = run_workspace_tests(workspace, extra_args=tuple(pytest_args or ()))
    return emit(report, exit_code=0 if report.ok else 1, as_json=as_json)


class TargetInfo(BaseModel):
    """The target `use` selected. Never holds the key itself: only where it came from."""

    kind: Literal["local", "cloud"]
    base_url: str
    key_set: bool
    key_source: str
    exports: list[str] = []  # shell lines for the CLI (the shell's env can't be changed from here)

    def __str__(self) -> str:
        key = (
            f"API key: set ({self.key_source})"
            if self.key_set
            else "API key: NOT set (DASHSCOPE_API_KEY in env or .env)"
        )
        lines = [f"target: {self.kind}  {self.base_url}", key]
        if self.exports:
            lines += ["run in your shell:", *[f"  {line}" for line in self.exports]]
        return "\n".join(lines)

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(str(self))  # plain text: a "[...]" in a URL or path is not rich markup

    def _repr_html_(self) -> str:
        from opd_nb import render

        key = (
            f'<span class="ok">set</span> ({render.esc(self.key_source)})'
            if self.key_set
            else '<span class="bad">not set</span> (put DASHSCOPE_API_KEY in the environment or .env)'
        )
        return render.box(
            render.table(["target", "base URL", "API key"], [(self.kind, self.base_url, key)], raw_cols=(2,))
        )


def _is_loopback(url: str) -> bool:
    host = (urlparse(url).hostname or "").lower()
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _normalize_api(url: str) -> str:
    url = url.strip().rstrip("/")
    if not urlparse(url).scheme:
        raise OpdError(f"base URL {url!r} has no scheme", fix="write it like http://127.0.0.1:8765/api/v1")
    return url if url.endswith("/api/v1") else url + "/api/v1"


def _running_local_api() -> str | None:
    """The API base of a background `opd serve start` server recorded in the server's state file."""
    try:
        from opd_nb.server import read_state
    except ImportError:
        return None
    state = read_state() or {}
    servers = state.get("servers") if isinstance(state.get("servers"), list) else [state]
    for info in reversed(servers):
        if isinstance(info, dict):
            value = info.get("api_base") or info.get("base_url")
            if value:
                return _normalize_api(str(value))
    return None


def use_target(kind: str, base_url: str | None = None) -> TargetInfo:
    """Point this process (the notebook kernel) at the local control plane or at Bailian.

    Sets ``DASHSCOPE_HTTP_BASE_URL`` (what both the SDK and our client read). For local, a
    placeholder key is supplied only if none is configured, and removed again by ``use cloud``.
    """
    if kind not in ("local", "cloud"):
        raise OpdError(f"unknown target {kind!r}", fix="use 'local' or 'cloud'")
    if kind == "local":
        api = _normalize_api(base_url) if base_url else (_running_local_api() or DEFAULT_LOCAL_API)
        if not _is_loopback(api):
            raise OpdError(
                f"{api} is not a loopback address", fix="the local control plane listens on 127.0.0.1"
            )
        os.environ["DASHSCOPE_HTTP_BASE_URL"] = api
        if not os.environ.get("DASHSCOPE_API_KEY"):
            os.environ["DASHSCOPE_API_KEY"] = "local"
            os.environ[_LOCAL_KEY_MARK] = "1"
    else:
        api = _normalize_api(base_url) if base_url else DEFAULT_CLOUD_API
        if _is_loopback(api):
            raise OpdError(f"{api} is a loopback address", fix="use `use local` for the local control plane")
        os.environ["DASHSCOPE_HTTP_BASE_URL"] = api
        if os.environ.pop(_LOCAL_KEY_MARK, None) and os.environ.get("DASHSCOPE_API_KEY") == "local":
            del os.environ["DASHSCOPE_API_KEY"]
    key_set, source = _key_status(kind)
    exports = [] if in_magic() else [f"export DASHSCOPE_HTTP_BASE_URL={api}"]
    return TargetInfo(kind=kind, base_url=api, key_set=key_set, key_source=source, exports=exports)


def _key_status(kind: str) -> tuple[bool, str]:
    """Whether a key is configured and where from, through the client's own resolution when present."""
    try:
        from opd_nb.client import resolve_target

        target = resolve_target(kind)
        if target.api_key is not None and target.api_key.get_secret_value():
            return True, "placeholder for the local server" if kind == "local" and os.environ.get(
                _LOCAL_KEY_MARK
            ) else "environment or .env"
        return False, ""
    except ImportError:
        pass
    except OpdError:
        return False, ""
    if os.environ.get("DASHSCOPE_API_KEY"):
        return True, "placeholder for the local server" if os.environ.get(_LOCAL_KEY_MARK) else "environment"
    if Path(".env").is_file():
        from dotenv import dotenv_values

        if dotenv_values(".env").get("DASHSCOPE_API_KEY"):
            return True, ".env"
    return False, ""


@app.command("use")
def use_cmd(
    kind: Annotated[str, typer.Argument(help="local or cloud", metavar="local|cloud")],
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="API base URL (default: the running local server, or Bailian)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
):
    """Target the local control plane or Bailian (base URL and key from env or .env; the key is never shown)."""
    info = use_target(kind, base_url)
    return emit(info, as_json=as_json)
