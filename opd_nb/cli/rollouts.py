"""`opd rollouts JOB`: what the student wrote at a step, each token shaded by how much the teacher disagrees.

In a terminal it prints the step's completions (user text as rich ``Text``, never markup); with
``--json`` it prints ``{"job_id", "step", "kind", "steps", "rollouts"}``. The result is a
:class:`RolloutsRequest`: a terminal fetches and prints that step, the notebook opens the rollout
viewer on it. A control plane without the endpoint (Bailian) is one line that points at the
console's trajectory view.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import emit, print_result
from opd_nb.cli.intents import RolloutsRequest
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client
from opd_nb.client.rollout_results import SORTS
from opd_nb.errors import OpdError

KINDS = ("train", "validation")


def _kind(kind: str | None) -> str | None:
    if kind is None or kind in KINDS:
        return kind
    raise OpdError(f"--kind must be train or validation, not {kind!r}", fix="--kind validation")


@app.command("rollouts")
def rollouts_cmd(
    job_id: str,
    step: Annotated[int | None, typer.Option(min=0, help="the step to show (default: the latest)")] = None,
    kind: Annotated[
        str | None,
        typer.Option(metavar="train|validation", help="only sampled (train) or validation answers"),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=0, help="at most this many samples")] = None,
    sort: Annotated[
        str, typer.Option(metavar="|".join(SORTS), help="sample order: by reward or by mean log-ratio")
    ] = "order",
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Show a step's recorded samples: prompt, completion (tokens shaded teacher vs student), reward."""
    kind = _kind(kind)
    if sort not in SORTS:
        raise OpdError(f"--sort must be one of {', '.join(SORTS)}, not {sort!r}", fix="--sort reward_desc")
    client = _client(local, cloud)
    request = RolloutsRequest(
        job_id=job_id, target=client.target, step=step, kind=kind, sort=sort, limit=limit
    )
    return emit(request, present=lambda: _print_rollouts(client, request, as_json))


def _print_rollouts(client: Any, request: RolloutsRequest, as_json: bool) -> None:
    """The terminal's side: the step's samples in `request.sort` order, or one line for Bailian."""
    page = client.rollouts(request.job_id, step=request.step, kind=request.kind, limit=request.limit)
    if page is None:
        from opd_nb.client.rollout_results import CLOUD_NOTE

        raise OpdError(
            f"no recorded rollouts for {request.job_id} here. {CLOUD_NOTE}",
            fix="open the job in the Bailian console, or run it on a local `opd serve`",
            exit_code=1,
        )
    print_result(page.sorted(request.sort), as_json=as_json)
