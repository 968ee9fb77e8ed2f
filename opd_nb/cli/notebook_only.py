"""`form`, `playground` and `config-cell`: the notebook-only verbs, parsed like every other command.

They live in the one Typer app so that the parser checks their arguments and generates their help.
Under ``%opd`` each returns a typed view request (``opd_nb.cli.view_requests``) that the notebook
turns into its widget; in a terminal each says in one line that it needs a notebook (exit 2).
``config-cell`` is what the ``%%opd config [PATH]`` cell magic runs: the magic passes the cell
body in through the hidden ``--body`` option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from opd_nb.cli._app import NOTEBOOK_PANEL, app
from opd_nb.cli._output import emit, in_magic
from opd_nb.cli.view_requests import ConfigCellRequest, FormRequest, PlaygroundRequest
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


def _notebook_only(verb: str, what: str, magic: str) -> OpdError:
    """The one-line answer a terminal gets for a verb that only a notebook can show."""
    return OpdError(f"`opd {verb}` is {what}: run `{magic}` in Jupyter after `%load_ext opd_nb`", exit_code=2)


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
    if not in_magic():
        raise _notebook_only("form", "a notebook widget", "%opd form [WORKSPACE]")
    from opd_nb.spec.job import workspace_config

    folder, config = workspace_config(workspace, config)
    return emit(FormRequest(workspace=str(folder), config=config, target=target))


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
    if not in_magic():
        raise _notebook_only("playground", "a notebook widget", "%opd playground [WORKSPACE]")
    from opd_nb.spec.job import workspace_config

    folder, _ = workspace_config(workspace)
    return emit(
        PlaygroundRequest(workspace=str(folder), processor_class=processor_class, concurrency=concurrency)
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
    if not in_magic():
        raise _notebook_only("config-cell", "a cell magic", "%%opd config [PATH]")
    if body is None:
        raise OpdError(
            "`config-cell` checks a cell's YAML body",
            fix="start a cell with `%%opd config [PATH]` and put the YAML of config.yaml below it",
        )
    return emit(ConfigCellRequest(body=body, path=path, target=target))
