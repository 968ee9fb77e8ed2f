"""`opd check` (preflight rules) and `opd config` (the effective merged job), on the shared app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit
from opd_nb.constants import DEFAULT_LOCAL_API


@app.command("check")
def check_cmd(
    workspace: Annotated[Path, typer.Argument(help="Workspace folder (default: current folder).")] = Path(
        "."
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as a JSON list.")] = False,
    target: Annotated[
        str, typer.Option("--target", "-t", help="cloud (the job's destination) or local.")
    ] = "cloud",
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help=f"Local control plane API base (default: $DASHSCOPE_HTTP_BASE_URL, else {DEFAULT_LOCAL_API}).",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option("--tokenizer", help="Local tokenizer dir for exact prompt lengths.")
    ] = None,
    config: Annotated[
        str, typer.Option("--config", "-c", help="Config file inside the workspace.")
    ] = "config.yaml",
):
    """Run every preflight rule over config, data, functions and environment. Exit 1 if any error."""
    from opd_nb.checks import check

    report = check(workspace, target, base_url=base_url, tokenizer_path=tokenizer, config=config)
    return emit(report, exit_code=0 if report.ok else 1, as_json=as_json)


@app.command("config")
def config_cmd(
    workspace: Annotated[Path, typer.Argument(help="Workspace folder (default: current folder).")] = Path(
        "."
    ),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print config, request body and sources as JSON.")
    ] = False,
    config: Annotated[
        str, typer.Option("--config", "-c", help="Config file inside the workspace.")
    ] = "config.yaml",
    model: Annotated[
        str | None, typer.Option("--model", help="Student model id (as a run() argument).")
    ] = None,
    teacher_model: Annotated[
        str | None, typer.Option("--teacher-model", help="Teacher model id (as a run() argument).")
    ] = None,
    job_name: Annotated[
        str | None, typer.Option("--job-name", help="Job name (as a run() argument).")
    ] = None,
    no_reward: Annotated[
        bool, typer.Option("--no-reward", help="Drop reward functions (pure distillation).")
    ] = False,
):
    """Print the effective job (defaults < YAML < run() arguments) as YAML the SDK loads identically."""
    from opd_nb.spec.effective import effective_job

    job = effective_job(
        workspace,
        config=config,
        model=model,
        teacher_model=teacher_model,
        job_name=job_name,
        no_reward=no_reward,
    )
    return emit(job, as_json=as_json)
