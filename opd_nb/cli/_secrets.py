"""Secret-bearing options: each has a variable and a ``--...-file PATH`` twin, and warns when typed.

A value typed on the command line is shown by `ps` to every user for the process's whole life and kept
in the shell's history (under ``%opd``, saved in the notebook's source), so each such option says so
on stderr, once, without the value; the file or the variable is the way that shows nothing. The one
warning and the file reader live in :mod:`opd_nb.settings` (``python -m opd_nb.server`` warns too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from opd_nb import settings
from opd_nb.cli._output import echo, in_notebook_source
from opd_nb.errors import OpdError


@dataclass(frozen=True)
class SecretOption:
    """One secret-bearing option: its flag, its parameter's name, its variable and its file option."""

    flag: str
    param: str
    var: str
    file_flag: str

    def file_help(self, what: str) -> str:
        return f"a file holding {what} (shown nowhere; or ${self.var})"


API_KEY = SecretOption("--api-key", "api_key", settings.SERVE_API_KEY.name, "--api-key-file")
NOTIFY_URL = SecretOption("--notify", "notify", settings.NOTIFY_URL.name, "--notify-file")
NOTIFY_SECRET = SecretOption(
    "--notify-secret", "notify_secret", settings.NOTIFY_SECRET.name, "--notify-secret-file"
)
OTLP_HEADER = SecretOption("--otlp-header", "otlp_header", settings.OTLP_HEADERS.name, "--otlp-header-file")
FAMILY = (API_KEY, NOTIFY_URL, NOTIFY_SECRET, OTLP_HEADER)


def typed(ctx: typer.Context, option: SecretOption) -> bool:
    """Whether the user typed `option` on this command line (not its variable, not its default)."""
    source = ctx.get_parameter_source(option.param)  # typer's own click: compare the name, not the enum
    return source is not None and source.name == "COMMANDLINE"


def warn_if_typed(ctx: typer.Context, option: SecretOption) -> None:
    """The one-line warning on stderr when `option` came from the command line (never its value)."""
    if typed(ctx, option):
        echo(
            settings.on_command_line(
                option.flag, option.var, option.file_flag, notebook=in_notebook_source()
            ),
            err=True,
        )


def secret(ctx: typer.Context, option: SecretOption, value: str | None, path: Path | None) -> str | None:
    """The option's value: from its file, else as given (typed: with the warning) or from its variable."""
    if path is None:
        warn_if_typed(ctx, option)
        return value or None
    if typed(ctx, option):
        raise OpdError(f"{option.flag} and {option.file_flag} both given", fix=f"keep {option.file_flag}")
    return settings.read_secret_file(path, option.file_flag)
