"""`opd traces JOB`: the SDK's spans of a step's function calls, as trees (durations, status, key facts).

``--step N`` picks the step (default: the latest with spans), ``--group G --sample S`` one rollout
record's calls (``opd rollouts`` names each record by them), ``--json`` prints the page. The result is
a :class:`TracesRequest`: a terminal fetches and prints that page, the notebook opens the trajectory
view on it. On Bailian the spans go to ARMS: one line says to open the console's Trajectory tab.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit, print_result
from opd_nb.cli.intents import TracesRequest
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client
from opd_nb.cli.rollouts import _kind
from opd_nb.errors import OpdError
from opd_nb.traces.page import CLOUD_NOTE, DEFAULT_TRAJECTORIES, MAX_TRAJECTORIES


@app.command("traces")
def traces_cmd(
    job_id: str,
    step: Annotated[int | None, typer.Option(min=0, help="the step to show (default: the latest)")] = None,
    kind: Annotated[
        str | None, typer.Option(metavar="train|validation", help="only train or validation calls")
    ] = None,
    group: Annotated[
        int | None, typer.Option(min=0, help="one prompt of the step (a record's group)")
    ] = None,
    sample: Annotated[
        int | None, typer.Option(min=0, help="one rollout of the prompt (a record's sample)")
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            min=1, max=MAX_TRAJECTORIES, help="at most this many trajectories (the title says of how many)"
        ),
    ] = DEFAULT_TRAJECTORIES,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Show the SDK's spans of a step's rollout and reward calls: LLM calls, tool calls, rewards."""
    kind = _kind(kind)
    client = _client(local, cloud)
    request = TracesRequest(
        job_id=job_id, target=client.target, step=step, kind=kind, group=group, sample=sample, limit=limit
    )
    return emit(request, present=lambda: _print_traces(client, request, as_json))


def _print_traces(client: Any, request: TracesRequest, as_json: bool) -> None:
    """The terminal's side: the step's span trees, or one line saying where Bailian keeps them."""
    r = request
    page = client.traces(r.job_id, step=r.step, kind=r.kind, group=r.group, sample=r.sample, limit=r.limit)
    if page is None:
        raise OpdError(
            f"no traces for {r.job_id} here. {CLOUD_NOTE}",
            fix="open the job in the Bailian console (Trajectory tab), or run it on a local `opd serve`",
            exit_code=1,
        )
    print_result(page, as_json=as_json)
