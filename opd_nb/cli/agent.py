"""`opd mcp` (serve the Model Context Protocol to a coding agent) and `opd mcp config --for AGENT`.

A thin front end over :mod:`opd_nb.agent`, which imports the `mcp` SDK (the `mcp` extra) only here.
``--local [URL]`` / ``--cloud`` set the plane the tools use when a call names none (as `opd use`);
``--http`` serves streamable HTTP on loopback, and a non-loopback ``--host`` needs a strong server key
(``OPD_SERVE_API_KEY``, ``--api-key-file`` or ``--api-key``), as `opd serve`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Any

import typer

from opd_nb import settings
from opd_nb.cli._app import app
from opd_nb.cli._argv import LOCAL_DEFAULT
from opd_nb.cli._output import emit, foreground, note
from opd_nb.cli._secrets import API_KEY, secret
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt
from opd_nb.errors import OpdError

MCP_PORT = 8766  # beside `opd serve`'s 8765
mcp_app = typer.Typer(
    name="mcp",
    help="Serve opd-nb's tools to a coding agent over the Model Context Protocol (stdio, or --http).",
    invoke_without_command=True,
    no_args_is_help=False,
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(mcp_app, name="mcp")


def _plane(local: str | None, cloud: bool) -> list[str]:
    """The `--local [URL]` / `--cloud` arguments to pass on (and to apply in this process)."""
    if local and cloud:
        raise OpdError("--local and --cloud are exclusive")
    if local:
        return ["--local"] + ([] if local == LOCAL_DEFAULT else [local])
    return ["--cloud"] if cloud else []


def _require_sdk() -> None:
    if importlib.util.find_spec("mcp") is None:
        raise OpdError(
            "`opd mcp` needs the mcp package, which is not installed", fix="pip install 'opd-nb[mcp]'"
        )


@mcp_app.callback()
def mcp_cmd(
    ctx: typer.Context,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    http: Annotated[
        bool, typer.Option("--http", help="streamable HTTP at http://HOST:PORT/mcp, not stdio")
    ] = False,
    host: Annotated[str, typer.Option(help="--http: interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="--http: port")] = MCP_PORT,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar=settings.SERVE_API_KEY.name,
            show_default=False,
            help=f"--http: the key every request must carry (needed off loopback): better "
            f"${settings.SERVE_API_KEY.name} or --api-key-file, as `ps` shows a key typed here",
        ),
    ] = None,  # fmt: skip
    api_key_file: Annotated[
        Path | None, typer.Option("--api-key-file", metavar="PATH", help=API_KEY.file_help("that key"))
    ] = None,
) -> Any:
    """Serve the tools (check, estimate, smoke, submit with consent, wait, metrics, alerts, samples, export,
    deploy, eval, ...) and resources over stdio, as agents start it (see `opd mcp config`)."""
    if ctx.invoked_subcommand is not None:
        return None
    if not foreground():
        raise OpdError("`opd mcp` is started by a coding agent, not in a notebook",
                       fix="run `opd mcp config --for claude-code` (or codex, qwen-code, cursor) in a terminal")  # fmt: skip
    _require_sdk()
    key = secret(ctx, API_KEY, api_key, api_key_file)  # typed: warned about, as `ps` shows it
    plane = _plane(local, cloud)
    if plane:
        from opd_nb.client.target import use_target

        use_target("cloud" if cloud else "local", plane[1] if len(plane) > 1 else None)
    from opd_nb.agent import server

    if http:
        server.run_http(host, port, key)
    else:
        server.run_stdio()
    return None


@mcp_app.command("config")
def mcp_config_cmd(
    agent: Annotated[
        str, typer.Option("--for", metavar="AGENT", help="claude-code | codex | qwen-code | cursor")
    ],
    write: Annotated[
        bool, typer.Option("--write", help="write it into the project (merged with what is there)")
    ] = False,
    project: Annotated[
        Path | None, typer.Option(help="the project folder (default: the current folder)")
    ] = None,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Print (or --write) the config AGENT reads to start `opd mcp` for this project; no key is written.
    Printed, stdout is exactly the file (`> .mcp.json` works); where it goes is said on stderr."""
    from opd_nb.agent.agent_config import agent_config

    config = agent_config(agent, _plane(local, cloud), project, write=write)
    if config.hint() and not as_json:
        note(config.hint())
    return emit(config, as_json=as_json)
