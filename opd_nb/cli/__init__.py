"""`opd` command line. The `%opd` magic parses its line with this same parser (see `invoke`)."""

from __future__ import annotations

import sys
from typing import Any

import typer

from opd_nb.cli import check as _check  # noqa: E402,F401
from opd_nb.cli import demo as _demo  # noqa: E402,F401
from opd_nb.cli import jobs as _jobs  # noqa: E402,F401

# Each module registers its commands on `app`; they import heavy libraries only inside commands.
from opd_nb.cli import new as _new  # noqa: E402,F401
from opd_nb.cli import serve as _serve  # noqa: E402,F401
from opd_nb.cli import session as _session  # noqa: E402,F401
from opd_nb.cli._app import app
from opd_nb.cli._argv import normalize
from opd_nb.cli._output import reset_magic, set_magic
from opd_nb.errors import OpdError

__all__ = ["app", "main", "invoke", "command"]


def command() -> Any:
    """The click command tree (built from the Typer app)."""
    return typer.main.get_command(app)


def invoke(argv: list[str], *, prog_name: str = "%opd") -> Any:
    """Parse and run `argv` as the magic does: return the command's typed result, print nothing.

    Usage mistakes become :class:`OpdError` (one line, no traceback). ``--help`` prints the help
    and returns None.
    """
    token = set_magic(True)
    try:
        rv = command().main(args=normalize(list(argv)), prog_name=prog_name, standalone_mode=False)
    except typer.Abort:
        raise OpdError("aborted") from None
    except typer.Exit as exc:
        return None if not getattr(exc, "exit_code", 0) else None
    except typer.TyperException as exc:  # usage errors from the parser
        raise OpdError(_message(exc), exit_code=getattr(exc, "exit_code", 2)) from None
    finally:
        reset_magic(token)
    if isinstance(rv, int) and not isinstance(rv, bool):
        return None  # an exit code (e.g. after --help)
    return rv


def _message(exc: BaseException) -> str:
    fmt = getattr(exc, "format_message", None)
    return fmt() if callable(fmt) else str(exc)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user mistakes print one line on stderr, never a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        rv = command().main(args=normalize(args), prog_name="opd", standalone_mode=False)
    except OpdError as exc:
        typer.secho(f"error: {exc}", err=True, fg="red")
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(getattr(exc, "exit_code", 0))
    except typer.TyperException as exc:  # usage errors: show usage line + message, exit 2
        if hasattr(exc, "show"):
            exc.show()
        else:
            typer.echo(f"error: {_message(exc)}", err=True)
        sys.exit(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)
