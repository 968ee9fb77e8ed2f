"""`opd probe WS`: before the first paid job, does the teacher beat the student on the workspace's reward?

N prompts (seeded) x K samples from each model through the plane's chat endpoint, scored with the
workspace's reward function as a job scores them (:mod:`opd_nb.experiments.probe`), then the verdicts.
In a terminal a progress bar runs on stderr and the result prints (``--json``: every figure, every
answer); the notebook opens the probe view. On Bailian every call is billed per token: ``--cloud``
says how many calls and tokens and needs ``--yes``; ``--budget`` caps the calls or tokens sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import echo, emit, print_result
from opd_nb.cli.eval import progress_bar
from opd_nb.cli.intents import ProbeRequest
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client


@app.command("probe")
def probe_cmd(
    workspace: Annotated[Path, typer.Argument(help="workspace folder (its models, data and reward)")] = Path(
        "."
    ),
    config: Annotated[
        str, typer.Option("--config", "-c", help="job YAML inside the workspace")
    ] = "config.yaml",
    prompts: Annotated[int, typer.Option("--prompts", "-n", min=1, help="prompts drawn (seeded)")] = 32,
    samples: Annotated[int, typer.Option("--samples", "-k", min=1, help="answers per prompt and model")] = 4,
    seed: Annotated[int, typer.Option(help="seed of the draw and the samples")] = 0,
    budget: Annotated[
        str | None,
        typer.Option(help="cap what is sent: N calls (64, 64calls) or tokens (20000tokens)"),
    ] = None,
    price: Annotated[
        float | None, typer.Option(help="money per million tokens, to see the probe's cost")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="confirm the paid calls of a --cloud probe")] = False,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Sample the teacher and the student on the workspace's prompts and score them with its reward:
    will OPD pay off, and if not, why (no headroom, a reward that rejects or does not separate, cut answers)."""
    from opd_nb.experiments.probe_plan import plan_probe, probe_cost, require_probe_consent
    from opd_nb.spec.job import workspace_config

    workspace, config = workspace_config(workspace, config)
    client = _client(local, cloud, workspace)
    plan = plan_probe(workspace.resolve(), prompts=prompts, samples=samples, seed=seed, config=config)
    cost = probe_cost(plan, price)
    require_probe_consent(client.target.kind, plan, cost, yes)  # nothing sent without --yes on Bailian
    if client.target.kind == "cloud":
        echo(f"note: this probe makes {cost.line()}", err=True)
    request = ProbeRequest(str(workspace), client.target, prompts, samples, seed, budget, price, yes, config)
    return emit(request, present=lambda: _probe_here(client, request, as_json))


def run_request(client: Any, request: ProbeRequest, progress: Any = None) -> Any:
    """The probe a request asks for (the terminal's and the notebook's one call into the core)."""
    from opd_nb.experiments.probe import probe

    return probe(
        Path(request.workspace),
        config=request.config,
        client=client,
        prompts=request.prompts,
        samples=request.samples,
        seed=request.seed,
        budget=request.budget,
        price=request.price,
        yes=request.yes,
        progress=progress,
    )


def _probe_here(client: Any, request: ProbeRequest, as_json: bool) -> None:
    with progress_bar("probe") as tick:
        result = run_request(client, request, tick)
    print_result(result, as_json=as_json)
