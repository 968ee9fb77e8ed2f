"""`opd metrics JOB`: every point of a job's metrics, a column per metric (``--json``: the series).

The same core call as the agent's ``metric_series`` tool (:func:`opd_nb.plots.job_series.job_series`).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client


@app.command("metrics")
def metrics_cmd(
    job_id: str,
    name: Annotated[
        list[str] | None,
        typer.Option(
            "--name", "-n", metavar="NAME", help="a metric to show (repeat it; default: every metric)"
        ),
    ] = None,
    global_steps: Annotated[
        bool, typer.Option("--global-steps", help="a continued job's steps after its parent's")
    ] = False,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Print every point of a job's metrics in step order (tab-separated; --json: one series per metric)."""
    from opd_nb.plots.job_series import job_series

    result = job_series(_client(local, cloud), job_id, name, global_steps=global_steps)
    return emit(result, exit_code=0 if result.available else 1, as_json=as_json)
