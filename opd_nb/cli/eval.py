"""`opd eval WS --model M [--model M2 ...]`: the workspace's validation rows, answered and scored per model.

Scoring is the workspace's own reward function (as in training), else exact match against
``rollout_extra.solution`` (pure distillation). In a terminal a progress bar runs on stderr and the
result is a table (``--json``: ``{"models": [...], "rows": [...]}``); under ``%opd`` the eval view
opens and runs it in the background. On Bailian every row costs a paid call: ``--cloud`` says how
many and needs ``--yes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import echo, emit, in_magic
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client
from opd_nb.cli.view_requests import EvalRequest


def cloud_notice(n_calls: int, models: list[str]) -> str:
    return (
        f"this evaluation makes {n_calls} calls to Bailian's chat API, which cost money "
        f"({n_calls // max(1, len(models))} rows x {len(models)} model(s)). A fine-tuned model answers only "
        "once deployed: `opd deploy MODEL --cloud --yes` (paid), then pass its deployed_model name to --model"
    )


@app.command("eval")
def eval_cmd(
    workspace: Annotated[Path, typer.Argument(help="workspace folder (its validation rows and reward)")],
    model: Annotated[
        list[str],
        typer.Option("--model", "-m", help="a model to evaluate (repeat to compare, e.g. trained and base)"),
    ],
    rows: Annotated[int | None, typer.Option(min=1, help="only the first N validation rows")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="calls in flight")] = 8,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", min=1, help="longest answer (default: the job's response room)"),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="confirm the paid calls of a --cloud evaluation")
    ] = False,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    as_json: JsonOpt = False,
) -> Any:
    """Answer the workspace's validation rows with each model and score them; rows that differ first."""
    from opd_nb.evaluation import calls_needed, evaluate
    from opd_nb.spec.job import workspace_config
    from opd_nb.spend import require_consent

    workspace = workspace_config(workspace)[0]  # the folder, or its config file
    client = _client(local, cloud, workspace)
    if client.target.kind == "cloud":
        notice = cloud_notice(calls_needed(workspace, model, rows), model)
        require_consent(client.target.kind, yes, notice, fix="rerun with --yes to make these calls")
        echo(f"note: {notice}", err=True)
    if in_magic():
        return EvalRequest(str(workspace), tuple(model), client.target, rows, concurrency, max_tokens)
    from tqdm import tqdm

    with tqdm(total=0, desc="eval", unit="call", file=typer.get_text_stream("stderr"), leave=False) as bar:

        def tick(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        result = evaluate(
            workspace,
            model,
            client=client,
            rows=rows,
            concurrency=concurrency,
            max_tokens=max_tokens,
            progress=tick,
        )
    return emit(result, as_json=as_json)
