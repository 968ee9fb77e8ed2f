"""`opd report JOB --to trackio,wandb,tensorboard,mlflow`: backfill a job into the user's trackers.

The same writer `opd watch --report-to` streams through (:mod:`opd_nb.trackers`); each tracker's
library is imported only when named, and a missing one is one line naming the extra to install.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client
from opd_nb.trackers.records import DEFAULT_PROJECT

ToOpt = Annotated[
    str,
    typer.Option("--to", metavar="TRACKERS", help="comma-separated: trackio, wandb, tensorboard, mlflow"),
]
ProjectOpt = Annotated[
    str | None,
    typer.Option(
        "--project", help=f"trackio project / W&B project / MLflow experiment [default: {DEFAULT_PROJECT}]"
    ),
]


@app.command("report")
def report_cmd(
    job_id: str,
    to: ToOpt,
    project: ProjectOpt = None,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Write a job's metrics (at global steps), config, samples, alerts and end to experiment trackers.

    A job is one run in each tracker: reporting it again, or after `opd watch --report-to`, resumes or
    replaces that run. A running job's last steps (still growing) wait for the next report or a watch."""
    from opd_nb.trackers import parse_report_to, report_job

    names = parse_report_to(to)
    with _client(local, cloud) as client:
        result = report_job(client, job_id, names, project=project or DEFAULT_PROJECT)
    return emit(result, as_json=as_json)
