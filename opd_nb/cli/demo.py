"""`opd demo`: scaffold, check, test, submit to a local control plane and watch to the end."""

from __future__ import annotations

from pathlib import Path

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import console


@app.command("demo")
def demo(
    directory: Path = typer.Argument(Path("opd-demo"), help="A new or empty directory for the demo."),
    port: int = typer.Option(0, help="Port for the local control plane (0: any free port)."),
    mode: str = typer.Option(
        "reward", help="The workspace to demo: reward, or agentic (a rollout function that calls a tool)."
    ),
) -> object:
    """Run the whole product offline: workspace -> check -> tests -> local job -> metrics PNG."""
    from opd_nb.demo import run_demo

    # The demo narrates every stage itself; the result is returned for the magic and for tests.
    return run_demo(directory, port=port, mode=mode, console=console())
