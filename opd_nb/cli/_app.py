"""The one Typer application behind both the `opd` CLI and the `%opd` magic."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="opd",
    help="opd-nb: scaffold, check, test, submit and watch online policy distillation (OPD) jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """opd-nb: scaffold, check, test, submit and watch online policy distillation (OPD) jobs."""


@app.command("version")
def version() -> None:
    """Print the opd-nb version."""
    from opd_nb import __version__

    typer.echo(__version__)
