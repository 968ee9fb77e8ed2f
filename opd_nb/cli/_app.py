"""The one Typer application behind both the `opd` CLI and the `%opd` magic.

Notebook-only verbs (the config form, the reward playground, the ``%%opd config`` cell) are
commands of this same app in the ``Notebook`` help panel. They are hidden in the terminal's
``opd --help``; the command tree built for the magic unhides them (``opd_nb.cli.command``), and
the help lists them in a section of their own, so ``%opd --help`` is generated, never hand-written.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

NOTEBOOK_PANEL = "Notebook"  # the help panel of the commands that only make sense in a notebook


# `opd --help` lists the verbs in the order of the flow, a section per stage (a new verb must be placed here:
# tests/test_cli_output.py checks that every visible command is).
FLOW: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Workspace", ("new", "data", "config", "demo")),
    ("Check", ("check", "test", "estimate", "probe")),
    ("Run", ("submit", "sweep")),
    ("Watch", ("jobs", "status", "watch", "logs", "metrics", "rollouts", "traces", "cancel")),
    (
        "After the job",
        (
            "checkpoints",
            "export",
            "deploy",
            "deployments",
            "chat",
            "eval",
            "compare",
            "report",
            "undeploy",
            "delete",
        ),
    ),
    ("Local plane and target", ("serve", "use")),
    ("Agents", ("mcp",)),
    ("About", ("version",)),
)
_PLACE = {name: (i, j, title) for i, (title, names) in enumerate(FLOW) for j, name in enumerate(names)}


class SectionedGroup(TyperGroup):
    """Plain-text help that lists the commands of each stage of the flow (and each other help panel, such as
    the notebook's) in a section of its own."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        sections: dict[str, list[tuple[str, Any]]] = {}
        unplaced = (len(FLOW), 0, "Commands")
        for name in sorted(self.list_commands(ctx), key=lambda n: _PLACE.get(n, unplaced)[:2]):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                panel = getattr(cmd, "rich_help_panel", None) or _PLACE.get(name, unplaced)[2]
                sections.setdefault(panel, []).append((name, cmd))
        if not sections:
            return
        width = max(len(name) for rows in sections.values() for name, _ in rows)
        limit = formatter.width - 6 - width
        for title, rows in sections.items():
            with formatter.section(title):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])


app = typer.Typer(
    name="opd",
    cls=SectionedGroup,
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
    from opd_nb._version import __version__
    from opd_nb.cli._output import echo

    echo(__version__)
