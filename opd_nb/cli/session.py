"""`opd test` and `opd use` commands (registered on the shared app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit, print_result


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
    from opd_nb.functions.testing import run_workspace_tests
    from opd_nb.spec.job import workspace_config

    report = run_workspace_tests(workspace_config(workspace)[0], extra_args=tuple(pytest_args or ()))
    return emit(report, exit_code=0 if report.ok else 1, as_json=as_json)


def running_server_api() -> str | None:
    """The API base of the background `opd serve start` server, if one is alive.

    Only a front end may ask the server package; the client takes the URL it is given.
    """
    from opd_nb.server import running_server

    server = running_server()
    return server.api_base if server is not None else None


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
    from opd_nb.client.target import use_target

    if kind == "local" and not base_url:
        base_url = running_server_api()
    info = use_target(kind, base_url, shell_exports=True)
    # The export line is for a shell: a command cannot change its shell's environment, while a caller
    # that takes the result back (the kernel under `%opd use`) is the process whose environment changed.
    return emit(info.model_copy(update={"exports": []}), present=lambda: print_result(info, as_json=as_json))
