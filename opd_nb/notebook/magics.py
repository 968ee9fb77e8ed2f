"""`%opd` / `%%opd`: the `opd` CLI inside a notebook, parsed by the very same parser.

``%opd LINE`` runs ``opd_nb.cli.invoke(shlex.split(LINE))`` and returns the command's typed
result, which Jupyter renders through its ``_repr_html_`` (plain text elsewhere). User mistakes
(``OpdError``) become a one-line ``UsageError``: no traceback.

Notebook-only verbs: ``%opd form [WS]`` (config form), ``%opd playground [WS]`` (reward
playground) and the cell magic ``%%opd config [PATH]`` (validate a YAML body, write it only if it
has no errors). Loading the extension imports nothing heavy: the CLI is imported on first use.
"""

from __future__ import annotations

import shlex
from typing import Any

_NOTEBOOK_VERBS = ("form", "playground")

CELL_USAGE = """\
%%opd config [PATH] [--target cloud|local]   (default: the current `%opd use` target)
    The cell body is a config.yaml. It is checked by the spec and the preflight rules, the findings
    are shown, and it is written to PATH (a workspace folder or a .yaml file; default ./config.yaml)
    only if there are no errors."""

EXTRA_HELP = """
Notebook-only:
  %opd form [WORKSPACE]         config form for config.yaml (live preflight checks, diff on save)
  %opd playground [WORKSPACE]   reward playground (score one answer or a JSONL batch)
  %%opd config [PATH]           validate the cell's YAML and write config.yaml if it has no errors
"""


def _usage_error(message: str) -> Exception:
    from IPython.core.error import UsageError

    return UsageError(message)


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True, posix=True)
    except ValueError as exc:
        raise _usage_error(f"%opd: cannot parse the line: {exc}") from None


def run_line(line: str) -> Any:
    """What `%opd LINE` does, callable without IPython magic machinery (returns the result)."""
    from opd_nb.errors import OpdError

    argv = _split(line)
    try:
        if argv and argv[0] in _NOTEBOOK_VERBS and not ({"-h", "--help"} & set(argv[1:])):
            return _notebook_verb(argv[0], argv[1:])
        from opd_nb.cli import invoke

        result = invoke(argv)
    except OpdError as exc:
        raise _usage_error(str(exc)) from None
    if not argv or argv[0] in ("-h", "--help") or argv == ["help"]:
        print(EXTRA_HELP)
    return result


def _notebook_verb(verb: str, args: list[str]) -> Any:
    from opd_nb.errors import OpdError

    if len(args) > 1 or (args and args[0].startswith("-")):
        raise OpdError(f"usage: %opd {verb} [WORKSPACE]")
    workspace = args[0] if args else "."
    if verb == "form":
        from opd_nb.notebook.form import ConfigForm

        return ConfigForm(workspace)
    from opd_nb.notebook.playground import RewardPlayground

    return RewardPlayground(workspace)


def run_cell(line: str, cell: str) -> Any:
    """What `%%opd LINE` + body does: only `config` takes a cell body."""
    from opd_nb.errors import OpdError

    argv = _split(line)
    if not argv or argv[0] in ("-h", "--help"):
        print(CELL_USAGE)
        return None
    if argv[0] != "config":
        raise _usage_error(
            f"%%opd {argv[0]}: only `%%opd config [PATH]` takes a cell body; use %opd {argv[0]} ... on one line"
        )
    args = argv[1:]
    if {"-h", "--help"} & set(args):
        print(CELL_USAGE)
        return None
    target = None
    if "--target" in args:
        i = args.index("--target")
        if i + 1 >= len(args):
            raise _usage_error("%%opd config: --target needs a value (cloud or local)")
        target = args[i + 1]
        del args[i : i + 2]
    if len(args) > 1 or (args and args[0].startswith("-")):
        raise _usage_error(f"usage: {CELL_USAGE.splitlines()[0]}")
    from opd_nb.notebook.configcell import write_config_text

    try:
        return write_config_text(cell, args[0] if args else ".", target=target)
    except OpdError as exc:
        raise _usage_error(str(exc)) from None


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
