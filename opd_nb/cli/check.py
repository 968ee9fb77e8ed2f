"""`opd check` (preflight rules) and `opd config` (the effective merged job), on the shared app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opd_nb import settings
from opd_nb.cli._app import app
from opd_nb.cli._output import config_sets, echo, emit, print_result
from opd_nb.workspace.connection import LOCAL_URL_RULE

SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="as `opd submit --set`: a config change for this run, e.g. n_epochs=2 (repeatable)",
    ),
]


@app.command("check")
def check_cmd(
    workspace: Annotated[
        Path, typer.Argument(help="Workspace folder or its config file (default: current folder).")
    ] = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as a JSON list.")] = False,
    target: Annotated[
        str, typer.Option("--target", "-t", help="cloud (the job's destination) or local.")
    ] = "cloud",
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help=f"Local control plane API base [default: {LOCAL_URL_RULE}].",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option("--tokenizer", help="Local tokenizer dir for exact prompt lengths.")
    ] = None,
    config: Annotated[
        str, typer.Option("--config", "-c", help="Config file inside the workspace.")
    ] = "config.yaml",
    sets: SetOpt = None,
):
    """Run every preflight rule over config, data, functions and environment. Exit 1 if any error.

    WORKSPACE is the folder or its config file; with --set, the config as `opd submit --set` would send it.
    """
    from opd_nb.checks import check

    changes = config_sets(sets)
    report = check(
        workspace, target, base_url=base_url, tokenizer_path=tokenizer, config=config, sets=changes
    )
    if as_json or not report.ok:
        return emit(report, exit_code=0 if report.ok else 1, as_json=as_json)
    return emit(report, present=lambda: _print_clean(report, workspace, config, changes))


def _print_clean(report: object, workspace: Path, config: str, sets: dict) -> None:
    """A clean check in a terminal: the report, then the job's size (`opd estimate`), so the price of a
    start is in view."""
    from opd_nb.errors import OpdError
    from opd_nb.paid.estimate import estimate

    print_result(report)
    try:
        echo(str(estimate(workspace, config=config, sets=sets)))
    except OpdError as exc:
        echo(f"no estimate: {exc}")


@app.command("estimate")
def estimate_cmd(
    workspace: Annotated[
        Path, typer.Argument(help="Workspace folder or its config file (default: current folder).")
    ] = Path("."),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the estimate as JSON (fields: README).")
    ] = False,
    config: Annotated[
        str, typer.Option("--config", "-c", help="Config file inside the workspace.")
    ] = "config.yaml",
    price: Annotated[
        float | None,
        typer.Option(
            "--price", help=f"money per training unit per hour {settings.PRICE_PER_UNIT_HOUR.flag_default()}"
        ),
    ] = None,
    smoke: Annotated[
        int | None,
        typer.Option("--smoke", metavar="[N]", min=0, help="size the smoke run of `opd submit --smoke [N]`"),
    ] = None,
    sets: SetOpt = None,
):
    """Size the job before it starts: steps, rollouts, evaluations, token bounds, reward calls, unit-hours."""
    from opd_nb.paid.estimate import estimate

    result = estimate(workspace, config=config, price=price, smoke=smoke, sets=config_sets(sets))
    return emit(result, as_json=as_json)


@app.command("config")
def config_cmd(
    workspace: Annotated[
        Path, typer.Argument(help="Workspace folder or its config file (default: current folder).")
    ] = Path("."),
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
    sets: SetOpt = None,
):
    """Print the effective job (defaults < YAML < run() arguments) as YAML the SDK loads identically."""
    from opd_nb.spec.effective import effective_job

    job = effective_job(
        workspace,
        config=config,
        sets=config_sets(sets),
        model=model,
        teacher_model=teacher_model,
        job_name=job_name,
        no_reward=no_reward,
    )
    return emit(job, as_json=as_json)
