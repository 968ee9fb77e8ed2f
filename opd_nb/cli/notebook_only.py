"""`form`, `playground` and `config-cell`: the notebook-only verbs, parsed like every other command.

They live in the one Typer app so that the parser checks their arguments and generates their help.
Each returns a typed intent (``opd_nb.cli.intents``): the notebook turns it into its widget (and reads
the workspace then), a terminal says in one line that it needs a notebook (exit 2).
``config-cell`` is what the ``%%opd config [PATH]`` cell magic runs: the magic passes the cell
body in through the hidden ``--body`` option.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from opd_nb.cli._app import NOTEBOOK_PANEL, app
from opd_nb.cli._output import emit
from opd_nb.cli.intents import ConfigCellRequest, FormRequest, PlaygroundRequest
from opd_nb.errors import OpdError

CELL_COMMANDS = {"config": "config-cell"}  # `%%opd VERB` -> the command that takes the cell body

TargetChoice = Annotated[
    Literal["cloud", "local"] | None,
    typer.Option(
        "--target",
        "-t",
        help="check against the cloud or the local rules (default: the current `%opd use` target)",
    ),
]
WorkspaceArg = Annotated[
    Path, typer.Argument(help="workspace folder or its config file (default: current folder)")
]


def _notebook_only(verb: str, what: str, magic: str) -> Callable[[], None]:
    """How a terminal presents a verb that only a notebook can show: one line, exit 2."""

    def refuse() -> None:
        raise OpdError(
            f"`opd {verb}` is {what}: run `{magic}` in Jupyter after `%load_ext opd_nb`", exit_code=2
        )

    return refuse


@app.command("form", hidden=True, rich_help_panel=NOTEBOOK_PANEL)
def form_cmd(
    workspace: WorkspaceArg = Path("."),
    config: Annotated[
        str, typer.Option("--config", "-c", help="job YAML inside the workspace")
    ] = "config.yaml",
    target: TargetChoice = None,
) -> Any:
    """Config form over config.yaml, checked live.

    Every hyper-parameter of the spec table, the preflight rules re-run on each edit, and a diff on
    save (only changed lines are written, comments kept).
    """
    request = FormRequest(workspace=str(workspace), config=config, target=target)
    return emit(request, present=_notebook_only("form", "a notebook widget", "%opd form [WORKSPACE]"))


@app.command("playground", hidden=True, rich_help_panel=NOTEBOOK_PANEL)
def playground_cmd(
    workspace: WorkspaceArg = Path("."),
    processor_class: Annotated[
        str | None,
        typer.Option("--processor-class", help="reward class to score with (default: config.yaml's)"),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="batch items scored at once")] = 8,
) -> Any:
    """Reward playground: score answers with the reward.

    Scores one candidate answer, or a JSONL batch, with the workspace's own reward function, in a
    fresh subprocess (your latest edits run; a crash never touches the kernel).
    """
    request = PlaygroundRequest(
        workspace=str(workspace), processor_class=processor_class, concurrency=concurrency
    )
    return emit(
        request, present=_notebook_only("playground", "a notebook widget", "%opd playground [WORKSPACE]")
    )


@app.command("config-cell", hidden=True, rich_help_panel=NOTEBOOK_PANEL)
def config_cell_cmd(
    path: Annotated[
        str, typer.Argument(help="workspace folder or .yaml file to write (default: ./config.yaml)")
    ] = ".",
    target: TargetChoice = None,
    body: Annotated[str | None, typer.Option("--body", hidden=True, help="the cell's YAML")] = None,
) -> Any:
    """`%%opd config [PATH]`: write the cell's YAML if clean.

    The cell body is a config.yaml: the spec and the preflight rules check it, the findings are
    shown, and it is written to PATH only if there are no errors.
    """
    request = ConfigCellRequest(body=body, path=path, target=target)
    return emit(request, present=_notebook_only("config-cell", "a cell magic", "%%opd config [PATH]"))
