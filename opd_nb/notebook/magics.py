"""`%opd` / `%%opd`: the `opd` CLI inside a notebook, parsed by the very same parser.

A magic is ``shlex`` plus the CLI parser: ``%opd LINE`` runs ``opd_nb.cli.invoke(shlex.split(LINE))``
and ``%%opd LINE`` + body runs ``opd_nb.cli.invoke_cell``, so options are checked and ``--help`` is
written by the parser, notebook-only verbs (``form``, ``playground``, ``%%opd config``) included.
The command's typed result (the one a terminal presents) goes through the notebook's one mapping of
result types to views (``opd_nb.notebook.views``): a watch becomes the monitor, the rest render
themselves. User mistakes (``OpdError``) become a one-line ``UsageError``: no traceback. Loading the
extension imports nothing heavy: the CLI is imported on first use.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any


def _usage_error(message: str) -> Exception:
    from IPython.core.error import UsageError

    return UsageError(message)


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True, posix=True)
    except ValueError as exc:
        raise _usage_error(f"%opd: cannot parse the line: {exc}") from None


def _run(parse: Callable[[], Any]) -> Any:
    """Run a parsed command and show its result as its view; user mistakes as one UsageError line."""
    from opd_nb.errors import OpdError
    from opd_nb.notebook.views import open_view

    try:
        return open_view(parse())
    except OpdError as exc:
        raise _usage_error(str(exc)) from None


def run_line(line: str) -> Any:
    """What `%opd LINE` does, callable without IPython magic machinery (returns the result)."""
    argv = _split(line)
    from opd_nb.cli import invoke

    return _run(lambda: invoke(argv))


def run_cell(line: str, cell: str) -> Any:
    """What `%%opd LINE` + body does: only `config` takes a cell body."""
    argv = _split(line)
    from opd_nb.cli import invoke_cell

    return _run(lambda: invoke_cell(argv, cell))


def opd_magic(line: str, cell: str | None = None) -> Any:
    """%opd SUBCOMMAND ... (see `%opd --help`); %%opd config [PATH] takes a YAML body."""
    if cell is None:
        return run_line(line)
    return run_cell(line, cell)


def load_ipython_extension(ipython: Any) -> None:
    """Register `%opd` (line and cell). Imports nothing heavy."""
    ipython.register_magic_function(opd_magic, magic_kind="line_cell", magic_name="opd")


def unload_ipython_extension(ipython: Any) -> None:
    magics = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("opd", None)
