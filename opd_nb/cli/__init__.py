"""`opd` command line. The `%opd` magic parses its line with this same parser (see `invoke`)."""

from __future__ import annotations

import sys
from typing import Any

import typer

# Each module registers its commands on `app`; they import heavy libraries only inside commands.
from opd_nb.cli import agent as _agent  # noqa: F401
from opd_nb.cli import check as _check  # noqa: F401
from opd_nb.cli import checkpoints as _checkpoints  # noqa: F401
from opd_nb.cli import data as _data  # noqa: F401
from opd_nb.cli import demo as _demo  # noqa: F401
from opd_nb.cli import deploy as _deploy  # noqa: F401
from opd_nb.cli import eval as _eval  # noqa: F401
from opd_nb.cli import experiments as _experiments  # noqa: F401
from opd_nb.cli import jobs as _jobs  # noqa: F401
from opd_nb.cli import metrics as _metrics  # noqa: F401
from opd_nb.cli import new as _new  # noqa: F401
from opd_nb.cli import notebook_only as _notebook_only  # noqa: F401
from opd_nb.cli import probe as _probe  # noqa: F401
from opd_nb.cli import report as _report  # noqa: F401
from opd_nb.cli import rollouts as _rollouts  # noqa: F401
from opd_nb.cli import serve as _serve  # noqa: F401
from opd_nb.cli import session as _session  # noqa: F401
from opd_nb.cli import traces as _traces  # noqa: F401
from opd_nb.cli._app import NOTEBOOK_PANEL, app
from opd_nb.cli._argv import normalize
from opd_nb.cli._output import echo, error, handing_back
from opd_nb.cli.intents import WatchRequest
from opd_nb.cli.notebook_only import CELL_COMMANDS
from opd_nb.errors import OpdError

__all__ = ["app", "main", "invoke", "invoke_cell", "command"]


def command(*, for_magic: bool = False) -> Any:
    """The click command tree (built from the Typer app; a fresh tree on every call).

    For the magic, the notebook-only commands are unhidden so that ``%opd --help`` lists them.
    """
    group = typer.main.get_group(app)
    if for_magic:
        for cmd in group.commands.values():
            if getattr(cmd, "rich_help_panel", None) == NOTEBOOK_PANEL:
                cmd.hidden = False
    return group


def _run_for_magic(cmd: Any, args: list[str], prog_name: str) -> Any:
    """Run a click command as the magic does: the typed result back, usage mistakes as OpdError.

    The one place the CLI hands a result back instead of presenting it (``_output.handing_back``):
    the caller, not the command, decides how to show it.
    """
    try:
        with handing_back():
            rv = cmd.main(args=args, prog_name=prog_name, standalone_mode=False)
    except typer.Abort:
        raise OpdError("aborted") from None
    except typer.Exit:
        return None  # --help (already printed) or an explicit exit
    except typer.TyperException as exc:  # usage errors from the parser
        raise OpdError(_message(exc), exit_code=getattr(exc, "exit_code", 2)) from None
    if isinstance(rv, int) and not isinstance(rv, bool):
        return None  # an exit code (e.g. after --help)
    return _hand_back(rv)


def _hand_back(result: Any) -> Any:
    """The result `invoke()` returns; the one thing a caller cannot be handed is a watch with a webhook.

    `--notify`'s URL and signing secret never go into a result, so a handed-back watch (the notebook's
    monitor) could not post to them and would stay silent: such a watch runs here, in a terminal, or in
    a detached watcher (`--detach`), which gets them in its environment.
    """
    if isinstance(result, WatchRequest) and result.notify:
        raise OpdError("in a notebook, --notify runs in a background watcher", fix="add --detach")
    return result


def invoke(argv: list[str], *, prog_name: str = "%opd") -> Any:
    """Parse and run `argv` as the magic does: return the command's typed result, print nothing.

    Usage mistakes become :class:`OpdError` (one line, no traceback). ``--help`` (or no argument
    at all) prints the help and returns None.
    """
    args = normalize(list(argv)) if argv else ["--help"]
    return _run_for_magic(command(for_magic=True), args, prog_name)


def invoke_cell(argv: list[str], body: str, *, prog_name: str = "%%opd") -> Any:
    """Run a cell magic: `argv` is its first line (``config [PATH] ...``), `body` the rest of the cell.

    Only the verbs of ``CELL_COMMANDS`` take a body; each runs its hidden command with the body
    passed in, so the parser checks the line's options and writes the help.
    """
    if not argv or argv[0] in ("-h", "--help"):
        argv = ["config", "--help"]  # the help of the one cell magic there is
    verb, args = argv[0], list(argv[1:])
    name = CELL_COMMANDS.get(verb)
    if name is None:
        raise OpdError(
            f"{prog_name} {verb}: only `{prog_name} config [PATH]` takes a cell body; "
            f"use %opd {verb} ... on one line"
        )
    cmd = command(for_magic=True).commands[name]
    return _run_for_magic(cmd, ["--body", body, *normalize(args)], f"{prog_name} {verb}")


def _message(exc: BaseException) -> str:
    fmt = getattr(exc, "format_message", None)
    return str(fmt()) if callable(fmt) else str(exc)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user mistakes print one line on stderr, never a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        rv = command().main(args=normalize(args), prog_name="opd", standalone_mode=False)
    except OpdError as exc:
        error(str(exc))
        sys.exit(exc.exit_code)
    except typer.Abort:
        echo("aborted", err=True)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(getattr(exc, "exit_code", 0))
    except typer.TyperException as exc:  # usage errors: show usage line + message, exit 2
        show = getattr(exc, "show", None)  # click's usage errors print themselves
        if callable(show):
            show()
        else:
            echo(f"error: {_message(exc)}", err=True)
        sys.exit(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)
