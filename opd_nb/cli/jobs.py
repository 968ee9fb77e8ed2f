"""`opd submit|jobs|status|logs|watch|cancel|delete`: job commands over the shared job client."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from opd_nb.cli._app import app
from opd_nb.cli._argv import LOCAL_DEFAULT as _LOCAL_DEFAULT
from opd_nb.cli._output import emit, in_magic
from opd_nb.cli.view_requests import WatchRequest
from opd_nb.cli.watch import wait_reporting_alerts, watch_terminal
from opd_nb.constants import LOCAL_HOST, LOCAL_PORT, SUCCEEDED
from opd_nb.errors import OpdError
from opd_nb.health import best_checkpoint_line

# `--local` takes an optional URL; opd_nb.cli._argv.normalize() fills in the default before parsing.
TargetOpt = Annotated[
    str | None,
    typer.Option(
        "--local", metavar="[URL]", help=f"use a local `opd serve` (default http://{LOCAL_HOST}:{LOCAL_PORT})"
    ),
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


def _exit_code(job: Any) -> int:
    """A watched job's exit code: 0 only for SUCCEEDED."""
    return 0 if job.status == SUCCEEDED else 1


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
    fresh: Annotated[
        bool, typer.Option("--fresh", help="register the functions again even if their code is unchanged")
    ] = False,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="change one config value for this submit only, e.g. training.hyper_parameters.learning_rate=2e-6 "
            "(VALUE is JSON, else text; repeatable)",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="print the effective job (submit_job.py --dry-run) and send nothing"),
    ] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="follow the job until it ends")] = False,
    as_json: JsonOpt = False,
) -> Any:
    """Submit the workspace's job through the dashscope SDK (registers functions, uploads data)."""
    from opd_nb.client import dry_run as dry_run_job
    from opd_nb.client import parse_sets, submit

    client = _client(local, cloud, workspace)
    changes = parse_sets(sets or [])
    overrides = {"job_name": job_name, "teacher_model": teacher_model, "model": model, "no_reward": no_reward}
    if dry_run:
        plan = dry_run_job(workspace, client.target, config=config, sets=changes, fresh=fresh, **overrides)
        return emit(plan, as_json=as_json)
    result = submit(workspace, client.target, config=config, fresh=fresh, sets=changes, **overrides)
    if in_magic():  # the notebook opens the job monitor on it
        return WatchRequest(job_ids=(result.job_id,), target=client.target, submitted=result)
    if watch and not as_json:
        typer.echo(str(result))
        job = watch_terminal(client, result.job_id)
        return emit(job, exit_code=_exit_code(job))
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
    search: Annotated[
        str | None, typer.Option("--search", help="only the lines containing this text (case-insensitive)")
    ] = None,
    tail: Annotated[
        int | None, typer.Option("--tail", min=1, help="only the last N (matching) lines")
    ] = None,
    as_json: JsonOpt = False,
) -> Any:
    """Print a job's log (with -f: follow it until the job ends; --search/--tail: filter the whole log)."""
    client = _client(local, cloud)
    if search is not None or tail is not None:
        if follow:
            raise OpdError("--follow cannot be combined with --search/--tail", fix="drop one of them")
        from opd_nb.log_search import search_logs

        return emit(search_logs(client, job_id, search, tail), as_json=as_json)
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
            return emit(None, exit_code=_exit_code(job))
        if len(page.lines) < lines:
            time.sleep(1.0)
        page = client.logs(job_id, offset=page.next_offset, lines=lines)


@app.command("watch")
def watch_cmd(job_id: str, local: TargetOpt = None, cloud: CloudOpt = False, as_json: JsonOpt = False) -> Any:
    """Follow a job: progress, metrics and health alerts in a terminal, a live widget in a notebook."""
    client = _client(local, cloud)
    if in_magic():  # the notebook opens the job monitor on it
        return WatchRequest(job_ids=(job_id,), target=client.target)
    if as_json:
        job = wait_reporting_alerts(client, job_id, lambda line: typer.echo(line, err=True))
    else:
        job = watch_terminal(client, job_id)
    if job.status == SUCCEEDED and not as_json:  # ends by naming the best checkpoint (the docs' rule)
        typer.echo(best_checkpoint_line(client.checkpoints(job_id), client.metrics(job_id)))
    return emit(job, exit_code=_exit_code(job), as_json=as_json)


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
