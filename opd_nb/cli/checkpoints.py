"""`opd checkpoints JOB` and `opd export JOB CHECKPOINT`: pick a checkpoint and make it deployable.

The same calls on both control planes (Bailian's checkpoint list and export). The table is
:mod:`opd_nb.health.checkpoint_table`'s; the export answers the checkpoint as the list shows it afterwards,
with the ``model_name`` to pass to ``opd deploy``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client


@app.command("checkpoints")
def checkpoints_cmd(
    job_id: str, local: TargetOpt = None, cloud: CloudOpt = False, as_json: JsonOpt = False
) -> Any:
    """A job's checkpoints: step, status, metrics, the best one, days until each expires, exported names."""
    from opd_nb.health.checkpoint_table import checkpoint_table

    client = _client(local, cloud)
    checkpoints = client.checkpoints(job_id) or []
    return emit(checkpoint_table(job_id, checkpoints, client.metrics(job_id)), as_json=as_json)


@app.command("export")
def export_cmd(
    job_id: str,
    checkpoint: Annotated[str, typer.Argument(help="checkpoint-N, JOB:checkpoint-N or the step number")],
    model_name: Annotated[
        str | None,
        typer.Option(
            "--model-name",
            help="a display name, shown by `opd checkpoints` (you deploy by the model_name the platform gives)",
        ),
    ] = None,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Export a checkpoint as a deployable model (the platform may auto-export only the best one)."""
    cp = _client(local, cloud).export_checkpoint(job_id, checkpoint, model_name=model_name)
    if as_json:
        return emit(cp, as_json=True)
    label = (
        f"; {cp.display_name!r} is its display name, a label: deploy by the model_name"
        if cp.display_name and cp.display_name != cp.model_name
        else ""
    )
    return emit(
        f"exported {cp.name} of {job_id} as model_name {cp.model_name}; deploy it with "
        f"`opd deploy {cp.model_name}`{label}"
    )
