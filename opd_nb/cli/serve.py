"""`opd serve [run|start|stop|status]`: the local Bailian-compatible control plane.

A thin front end over :mod:`opd_nb.server.lifecycle`: it parses the flags into one
:class:`~opd_nb.server.records.ServeOptions`, hands it whole to the lifecycle, branches on the type of
the start result and emits a :class:`~opd_nb.server.serve_info.ServeInfo`. Safe by default: a
non-loopback ``--host`` needs a server key (``OPD_SERVE_API_KEY``, ``--api-key-file`` or ``--api-key``);
the key is never printed, only where to put it. Secrets reach a background server in its environment,
never its command line (see :mod:`opd_nb.cli._secrets`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from opd_nb import settings
from opd_nb.cli._app import app
from opd_nb.cli._output import echo, emit, foreground
from opd_nb.cli._secrets import API_KEY, OTLP_HEADER, secret, warn_if_typed
from opd_nb.constants import LOCAL_HOST, LOCAL_PORT
from opd_nb.errors import OpdError
from opd_nb.loopback import binds_loopback_only
from opd_nb.server import ServeOptions, ServerInfo
from opd_nb.server.records import (
    API_KEY_ENV,
    MAX_INTERRUPTIONS,
    parse_model_map,
)
from opd_nb.server.runner import bind_line, open_warning
from opd_nb.server.serve_info import ServeInfo, start_info, status_info, stop_info
from opd_nb.server.tracing.otlp_forward import forward_url

ACTIONS = ("run", "start", "stop", "status")


def print_banner(info: ServerInfo) -> None:
    """Once bound: the real bind address, a warning off loopback, and how to target the server."""
    echo(f"{bind_line(info)}; Ctrl-C stops it")
    if not binds_loopback_only(info.host):
        echo(open_warning(info.host), err=True)
    echo("target it from a workspace (before importing dashscope) with:")
    for key, value in ServeInfo.of(info).env().items():
        echo(f"  export {key}={value}")


def run_foreground(options: ServeOptions, api_key: str | None = None) -> None:
    """`opd serve run`: serve until Ctrl-C; a refused start is exit 2 with its one line (on stderr)."""
    from opd_nb.server.runner import serve_forever

    rc = serve_forever(options, api_key=api_key, banner=print_banner)
    if rc:
        raise typer.Exit(rc)


# The flags of `opd serve`, one alias each (what users type; each becomes a ServeOptions field).
ActionArg = Annotated[
    str | None,
    typer.Argument(help="run (foreground; CLI default) | start (background; magic default) | stop | status"),
]
HostFlag = Annotated[str, typer.Option(help="interface to listen on")]
PortFlag = Annotated[int, typer.Option(help="port (0 picks a free one)")]
DataDirFlag = Annotated[
    str | None,
    typer.Option(help=f"where jobs, files and checkpoints live {settings.DATA_DIR.flag_default()}"),
]
ModelMapFlag = Annotated[
    list[str] | None,
    typer.Option("--model-map", help="ID=PATH: run model ID on a local Hugging Face directory (repeatable)"),
]
ApiKeyFlag = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar=API_KEY_ENV,
        show_default=False,
        show_envvar=True,
        help=f"the only key the server accepts (needed for a non-loopback --host): better ${API_KEY_ENV} "
        "or --api-key-file, as `ps` shows a key typed here",
    ),
]
ApiKeyFileFlag = Annotated[
    Path | None,
    typer.Option("--api-key-file", metavar="PATH", help=API_KEY.file_help("the server key")),
]
ResumeFlag = Annotated[
    bool,
    typer.Option(
        "--resume/--no-resume",
        help="resume jobs that were running when the server stopped (--no-resume: fail them)",
    ),
]
MaxInterruptionsFlag = Annotated[
    int, typer.Option(min=1, help="a job interrupted this many times fails instead of resuming")
]
MaxDeploymentsFlag = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="how many deployments may run at once (past that, a deploy is a 400) "
        f"{settings.MAX_DEPLOYMENTS.flag_default()}",
    ),
]
CheckpointTtlFlag = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        help="days a checkpoint lives (its expire_time; nothing is deleted locally) "
        f"{settings.CHECKPOINT_TTL_DAYS.flag_default()}",
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
OtlpForwardFlag = Annotated[
    str | None,
    typer.Option(
        "--otlp-forward",
        metavar="URL",
        help="also send the jobs' spans to this OTLP/HTTP collector (Jaeger, Phoenix, Langfuse: http://host:4318)",
    ),
]
OtlpHeaderFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--otlp-header",
        metavar="K=V",
        help=f"a header for --otlp-forward (repeatable): better ${settings.OTLP_HEADERS.name} or "
        "--otlp-header-file for its key, as `ps` shows a header typed here",
    ),
]
OtlpHeaderFileFlag = Annotated[
    Path | None,
    typer.Option(
        "--otlp-header-file",
        metavar="PATH",
        help=OTLP_HEADER.file_help("the --otlp-forward headers, NAME=VALUE a line"),
    ),
]


def otlp_headers(ctx: typer.Context, items: list[str] | None, path: Path | None) -> dict[str, str]:
    """The collector's headers: ``$OPD_OTLP_HEADERS``, then the file's, then each typed ``--otlp-header``
    (a later one wins for the same name)."""
    from opd_nb.server.tracing.otlp_forward import parse_headers

    out = dict(settings.OTLP_HEADERS.get() or {})
    if path is not None:
        text = settings.read_secret_file(path, OTLP_HEADER.file_flag, lines=True)
        try:
            out.update(settings.headers(text))
        except ValueError:
            raise OpdError(
                f"{OTLP_HEADER.file_flag} {path}: a line is not NAME=VALUE",
                fix="write one header a line, e.g. Authorization=Bearer <key>",
            ) from None
    warn_if_typed(ctx, OTLP_HEADER)
    out.update(parse_headers(items))
    return out


@contextlib.contextmanager
def _forward_headers(headers: dict[str, str]) -> Iterator[None]:
    """The headers (they may hold a collector's key) in the server's environment only, as one JSON
    variable: set while the server starts or runs, then taken out of this process again. The user's
    own variable is out of the environment meanwhile, so that no job worker inherits it."""
    from opd_nb.server.tracing.otlp_forward import HEADERS_ENV

    users = settings.OTLP_HEADERS.raw()
    os.environ.pop(settings.OTLP_HEADERS.name, None)
    if headers:
        os.environ[HEADERS_ENV] = json.dumps(headers)
    try:
        yield
    finally:
        os.environ.pop(HEADERS_ENV, None)
        if users is not None:
            os.environ[settings.OTLP_HEADERS.name] = users


@app.command("serve")
def serve(
    ctx: typer.Context,
    action: ActionArg = None,
    host: HostFlag = LOCAL_HOST,
    port: PortFlag = LOCAL_PORT,
    data_dir: DataDirFlag = None,
    model_map: ModelMapFlag = None,
    api_key: ApiKeyFlag = None,
    api_key_file: ApiKeyFileFlag = None,
    resume: ResumeFlag = True,
    max_interruptions: MaxInterruptionsFlag = MAX_INTERRUPTIONS,
    max_deployments: MaxDeploymentsFlag = None,
    checkpoint_ttl_days: CheckpointTtlFlag = None,
    otlp_forward: OtlpForwardFlag = None,
    otlp_header: OtlpHeaderFlag = None,
    otlp_header_file: OtlpHeaderFileFlag = None,
    as_json: JsonFlag = False,
) -> Any:
    """Run the local Bailian-compatible control plane that the unmodified dashscope SDK talks to."""
    action = action or ("run" if foreground() else "start")
    if action not in ACTIONS:
        raise OpdError(f"unknown action {action!r}", fix=f"use one of: {', '.join(ACTIONS)}")
    options = ServeOptions(
        host=host,
        port=port,
        data_dir=data_dir,
        model_map=parse_model_map(model_map),
        resume=resume,
        max_interruptions=max_interruptions,
        max_deployments=max_deployments,
        checkpoint_ttl_days=checkpoint_ttl_days,
        otlp_forward=forward_url(otlp_forward) if otlp_forward else None,
    )
    if (otlp_header or otlp_header_file) and not otlp_forward:
        flag = "--otlp-header" if otlp_header else OTLP_HEADER.file_flag
        raise OpdError(f"{flag} needs --otlp-forward URL", fix="add --otlp-forward http://host:4318")
    key = secret(ctx, API_KEY, api_key, api_key_file)  # typed: warned about whatever the action
    if action in ("run", "start"):
        headers = otlp_headers(ctx, otlp_header, otlp_header_file) if otlp_forward else {}
        with _forward_headers(headers):
            if action == "run":
                return run_foreground(options, key)
            return emit(start_info(options, key), as_json=as_json)
    if action == "stop":
        return emit(stop_info(data_dir, kernel=not foreground()), as_json=as_json)
    info = status_info(data_dir)
    return emit(info, exit_code=0 if info.running else 1, as_json=as_json)
