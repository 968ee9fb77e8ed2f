"""`opd new MODE DEST`: scaffold an OPD workspace from the bundled template (also `%opd new`)."""

from __future__ import annotations

from typing import Annotated

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit, interactive
from opd_nb.workspace.new import DEFAULT_REWARD_CLASS, DEFAULT_STUDENT, DEFAULT_TEACHER


@app.command("new")
def new(
    mode: Annotated[str, typer.Argument(help="pure-distill | reward | agentic", metavar="MODE")],
    dest: Annotated[
        str, typer.Argument(help="directory to create (must not exist, or be empty)", metavar="DEST")
    ],
    name: Annotated[
        str | None, typer.Option(help="workspace name; the job name is its slug (default: DEST's name)")
    ] = None,
    student: Annotated[
        str | None, typer.Option(help=f"student model id [default: {DEFAULT_STUDENT}]")
    ] = None,
    teacher: Annotated[
        str | None, typer.Option(help=f"teacher model id [default: {DEFAULT_TEACHER}]")
    ] = None,
    with_reward: Annotated[
        bool | None,
        typer.Option(
            "--with-reward/--no-reward", help="agentic only: also add a reward function (default: yes)"
        ),
    ] = None,
    reward_class: Annotated[
        str | None, typer.Option(help=f"reward processor class name [default: {DEFAULT_REWARD_CLASS}]")
    ] = None,
    no_input: Annotated[
        bool, typer.Option("--no-input", help="never prompt; use defaults for what is not given")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> object:
    """Create a workspace: config.yaml, data, submit_job.py, tests, and the functions the mode needs."""
    from opd_nb.workspace.new import create

    if not no_input and not as_json and interactive():
        from pathlib import Path

        name = (
            name
            if name is not None
            else typer.prompt("Workspace name", default=Path(dest).name or "opd-workspace")
        )
        student = student if student is not None else typer.prompt("Student model", default=DEFAULT_STUDENT)
        teacher = teacher if teacher is not None else typer.prompt("Teacher model", default=DEFAULT_TEACHER)
        if mode == "agentic" and with_reward is None:
            with_reward = typer.confirm("Also add a reward function?", default=True)
    workspace = create(
        mode,
        dest,
        name=name,
        student=student,
        teacher=teacher,
        with_reward=with_reward,
        reward_class=reward_class,
    )
    return emit(workspace, as_json=as_json)
