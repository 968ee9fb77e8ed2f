"""`opd sweep` (one variable, one job per value, functions registered once) and `opd compare`.

A submitted sweep is a :class:`SweepRequest` (its jobs, and the target to follow them on): a terminal
prints it, the notebook opens the multi-job monitor. A comparison is the core's ``Comparison``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit, note, print_result
from opd_nb.cli.intents import SweepRequest
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client

if TYPE_CHECKING:
    from opd_nb.client import SubmitResult
    from opd_nb.experiments import SweepPoint


@app.command("sweep")
def sweep_cmd(
    param: Annotated[
        list[str],
        typer.Option(
            "--param",
            "-p",
            metavar="NAME=V1,V2,...",
            help="the one hyper-parameter (or resource) to vary and its values, e.g. learning_rate=5e-7,1e-6",
        ),
    ],
    workspace: Annotated[
        Path, typer.Argument(help="workspace folder or its config file (default: current folder)")
    ] = Path("."),
    grid: Annotated[
        bool, typer.Option("--grid", help="allow several --param: one job per combination")
    ] = False,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print each value's effective job and send nothing")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="confirm the paid jobs of a cloud sweep")] = False,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="the first job registers the functions again, even if unchanged")
    ] = False,
    config: Annotated[
        str, typer.Option("--config", "-c", help="job YAML inside the workspace")
    ] = "config.yaml",
    as_json: JsonOpt = False,
) -> Any:
    """Submit one job per value, each config.yaml plus that one change; the first registers the functions."""
    from opd_nb.experiments import SweepResult, run_sweep

    client = _client(local, cloud, workspace)

    def progress(point: SweepPoint, result: SubmitResult) -> None:
        notes = "; ".join(str(f.get("note")) for f in result.functions)
        note(f"submitted {point.label}: {result.job_id}" + (f" ({notes})" if notes else ""))

    result = run_sweep(
        str(workspace),
        param,
        client.target,
        grid=grid,
        dry_run=dry_run,
        yes=yes,
        fresh=fresh,
        config=config,
        on_submitted=None if as_json else progress,
        on_note=None if as_json else note,
    )
    if not isinstance(result, SweepResult):  # a dry run's plan
        return emit(result, as_json=as_json)
    sweep = SweepRequest(sweep=result, target=client.target)
    return emit(sweep, present=lambda: print_result(result, as_json=as_json))


@app.command("compare")
def compare_cmd(
    job_ids: Annotated[list[str], typer.Argument(metavar="JOB...", help="two or more job ids")],
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Jobs side by side: status, steps, differing parameters, metrics, best checkpoints, the winner."""
    from opd_nb.experiments import compare_jobs

    return emit(compare_jobs(_client(local, cloud), job_ids), as_json=as_json)
