"""`opd submit|jobs|status|logs|watch|cancel|delete`: job commands over the shared job client."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._argv import LOCAL_DEFAULT as _LOCAL_DEFAULT
from opd_nb.cli._output import emit, in_magic
from opd_nb.errors import OpdError

# `--local` takes an optional URL; opd_nb.cli._argv.normalize() fills in the default before parsing.
TargetOpt = Annotated[
    str | None,
    typer.Option("--local", metavar="[URL]", help="use a local `opd serve` (default http://127.0.0.1:8765)"),
]
CloudOpt = Annotated[bool, typer.Option("--cloud", help="use Bailian (key from DASHSCOPE_API_KEY or .env)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]


def _client(local: str | None, cloud: bool, workspace: Path | None = None) -> Any:
    from opd_nb.client import JobClient, resolve_target

    if local and cloud:
        raise OpdError("--local and --cloud are exclusive")
    if local:
        target = resolve_target(
            "local", base_url=None if local == _LOCAL_DEFAULT else local, workspace=workspace
        )
    else:
        target = resolve_target("cloud" if cloud else None, workspace=workspace)
    return JobClient(target)


def _monitor(job_ids: list[str], client: Any) -> Any:
    from opd_nb.notebook.monitor import JobMonitor

    return JobMonitor(job_ids, client).start()


@app.command("submit")
def submit_cmd(
    workspace: Annotated[Path, typer.Argument(help="workspace folder (default: current folder)")] = Path("."),
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    config: Annotated[
        str, typer.Option("--config", "-c", help="job YAML inside the workspace")
    ] = "config.yaml",
    job_name: Annotated[str | None, typer.Option(help="job name (the service appends -<8 hex>)")] = None,
    teacher_model: Annotated[str | None, typer.Option(help="teacher model id (overrides config)")] = None,
    model: Annotated[str | None, typer.Option(help="student model id (overrides config)")] = None,
    no_reward: Annotated[bool, typer.Option("--no-reward", help="submit without reward functions")] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="follow the job until it ends")] = False,
    as_json: JsonOpt = False,
) -> Any:
    """Submit the workspace's job through the dashscope SDK (registers functions, uploads data)."""
    from opd_nb.client import submit

    client = _client(local, cloud, workspace)
    result = submit(
        workspace,
        client.target,
        config=config,
        job_name=job_name,
        teacher_model=teacher_model,
        model=model,
        no_reward=no_reward,
    )
    if in_magic():
        return _monitor([result.job_id], client)
    if watch and not as_json:
        typer.echo(str(result))
        job = _watch_terminal(client, result.job_id)
        return emit(job, exit_code=0 if job.status == "SUCCEEDED" else 1)
    return emit(result, as_json=as_json)


@app.command("jobs")
def jobs_cmd(
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    page: Annotated[int, typer.Option(min=1, help="page number")] = 1,
    size: Annotated[int, typer.Option(min=1, max=100, help="jobs per page")] = 20,
    as_json: JsonOpt = False,
) -> Any:
    """List jobs, newest first."""
    return emit(_client(local, cloud).list(page=page, size=size), as_json=as_json)


@app.command("status")
def status_cmd(
    job_id: str, local: TargetOpt = None, cloud: CloudOpt = False, as_json: JsonOpt = False
) -> Any:
    """Show one job."""
    return emit(_client(local, cloud).get(job_id), as_json=as_json)


@app.command("logs")
def logs_cmd(
    job_id: str,
    local: TargetOpt = None,
    cloud: CloudOpt = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new lines until the job ends")
    ] = False,
    offset: Annotated[int, typer.Option(min=0, help="first line (1-based)")] = 1,
    lines: Annotated[int, typer.Option(min=1, max=10000, help="lines per page")] = 200,
    as_json: JsonOpt = False,
) -> Any:
    """Print a job's log (with -f: follow it until the job ends)."""
    client = _client(local, cloud)
    page = client.logs(job_id, offset=offset, lines=lines)
    if not follow or in_magic():
        return emit(page, as_json=as_json)
    while True:
        for line in page.lines:
            typer.echo(line)
        job = client.get(job_id) if len(page.lines) < lines else None
        if job is not None and job.terminal:
            rest = client.logs(job_id, offset=page.next_offset, lines=10000)
            for line in rest.lines:
                typer.echo(line)
            return emit(None, exit_code=0 if job.status == "SUCCEEDED" else 1)
        if len(page.lines) < lines:
            time.sleep(1.0)
        page = client.logs(job_id, offset=page.next_offset, lines=lines)


def _watch_terminal(client: Any, job_id: str) -> Any:
    """Rich progress bar plus the latest metrics until the job reaches a terminal state."""
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.table import Table
    from rich.text import Text

    console = Console()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        console=console,
    )
    task = progress.add_task(job_id, total=None)
    shown = (
        "actor/distillation/loss",
        "trace/distillation/valid_token_rate",
        "validation/accuracy",
        "validation/data/reward/mean@1",
        "actor/lr",
        "perf/tokens_per_s",
    )

    def render(job: Any, rows: list[dict] | None) -> Any:
        table = Table(title="latest metrics", show_header=True)
        table.add_column("metric")
        table.add_column("value", justify="right")
        last: dict[str, Any] = {}
        for row in rows or []:
            last.update({k: v for k, v in row.items() if v is not None})
        for key in shown:
            if key in last:
                value = last[key]
                table.add_row(Text(key), f"{value:.4g}" if isinstance(value, float) else Text(str(value)))
        if "step" in last:
            table.add_row("step", str(last["step"]))
        return Group(progress, table)

    with Live(render(None, None), console=console, refresh_per_second=4) as live:
        while True:
            job = client.get(job_id)
            prog = job.progress or {}
            progress.update(
                task,
                description=f"{job_id} {job.status}",
                total=prog.get("total_steps"),
                completed=prog.get("step") or 0,
            )
            live.update(render(job, client.metrics(job_id)))
            if job.terminal:
                return job
            time.sleep(1.0)


@app.command("watch")
def watch_cmd(job_id: str, local: TargetOpt = None, cloud: CloudOpt = False, as_json: JsonOpt = False) -> Any:
    """Follow a job: progress bar and metrics in a terminal, a live widget in a notebook."""
    client = _client(local, cloud)
    if in_magic():
        return _monitor([job_id], client)
    if as_json:
        job = client.wait(job_id)
    else:
        job = _watch_terminal(client, job_id)
    return emit(job, exit_code=0 if job.status == "SUCCEEDED" else 1, as_json=as_json)


@app.command("cancel")
def cancel_cmd(
    job_id: str, local: TargetOpt = None, cloud: CloudOpt = False, as_json: JsonOpt = False
) -> Any:
    """Cancel a job (a running local job stops within a few seconds)."""
    return emit(_client(local, cloud).cancel(job_id), as_json=as_json)


@app.command("delete")
def delete_cmd(job_id: str, local: TargetOpt = None, cloud: CloudOpt = False) -> Any:
    """Delete a finished job from the list."""
    _client(local, cloud).delete(job_id)
    return emit(f"deleted {job_id}")
