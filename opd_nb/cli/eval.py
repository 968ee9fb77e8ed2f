"""`opd eval WS --model M [--model M2 ...]`: the workspace's validation rows, answered and scored per model.

Scoring is the workspace's own reward function (as in training), else exact match against
``rollout_extra.solution`` (pure distillation). In a terminal a progress bar (rich) runs on stderr and the
result is a table (``--json``: ``{"models": [...], "rows": [...]}``). The command's result is an
:class:`EvalRequest`: a terminal runs it there and then, the notebook opens the eval view, which runs
it in the background. On Bailian every row costs a paid call: ``--cloud`` says how
many and needs ``--yes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._output import console, echo, emit, print_result
from opd_nb.cli.intents import EvalRequest
from opd_nb.cli.jobs import CloudOpt, JsonOpt, TargetOpt, _client

if TYPE_CHECKING:
    from rich.progress import TaskID


@contextmanager
def progress_bar(label: str = "eval") -> Iterator[Callable[[int, int], None]]:
    """A bar on stderr from the first call on (calls done of all calls), gone when the table prints;
    nothing at all when stderr is not a terminal (a log, a pipe)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("calls"),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
    )
    task: list[TaskID] = []

    def tick(done: int, total: int) -> None:
        if not task:
            task.append(bar.add_task(label, total=total))
        bar.update(task[0], completed=done, total=total)

    with bar:
        yield tick


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
    from opd_nb.experiments.evaluation import require_eval_consent
    from opd_nb.spec.job import workspace_config

    workspace = workspace_config(workspace)[0]  # the folder, or its config file
    client = _client(local, cloud, workspace)
    notice = require_eval_consent(client.target.kind, workspace, model, rows, yes, max_tokens)
    if notice:
        echo(f"note: {notice}", err=True)
    request = EvalRequest(str(workspace), tuple(model), client.target, rows, concurrency, max_tokens, yes)
    return emit(request, present=lambda: _evaluate_here(client, request, as_json))


def _evaluate_here(client: Any, request: EvalRequest, as_json: bool) -> None:
    """The terminal's eval: a progress bar on stderr, then the table (or JSON)."""
    from opd_nb.experiments.evaluation import evaluate

    with progress_bar() as tick:
        result = evaluate(
            Path(request.workspace),
            list(request.models),
            client=client,
            rows=request.rows,
            concurrency=request.concurrency,
            max_tokens=request.max_tokens,
            progress=tick,
            yes=request.yes,
        )
    print_result(result, as_json=as_json)
