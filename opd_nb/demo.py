"""`opd demo`: the whole product in one command, offline.

Scaffold a reward workspace (or, with ``mode="agentic"``, one whose rollout function calls a tool
over several turns), check it, run its tests, start a local control plane, submit through
the workspace's own ``submit_job.py --local``, follow the job with a progress bar to SUCCEEDED,
print a summary of the metrics, write a PNG of the curves next to the workspace, and stop the
control plane again. Each stage is a public API call, so the demo doubles as an integration test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from opd_nb.constants import SUCCEEDED
from opd_nb.errors import OpdError

_JOB_ID = re.compile(r"job[ _-]?id\W+([A-Za-z0-9][\w.-]*)", re.IGNORECASE)


class DemoResult(BaseModel):
    """What the demo produced, for a closing summary (and for tests)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    workspace: Path
    job_id: str
    status: str
    finetuned_output: str | None = None
    png: Path | None = None
    summary: list[dict[str, Any]] = []
    seconds: float

    def __str__(self) -> str:
        lines = [f"job {self.job_id}: {self.status} in {self.seconds:.0f}s", f"workspace: {self.workspace}"]
        if self.finetuned_output:
            lines.append(f"published model: {self.finetuned_output}")
        if self.png:
            lines.append(f"metric curves: {self.png}")
        return "\n".join(lines)


def parse_job_id(output: str) -> str | None:
    """The job id printed by `submit_job.py` (last one wins)."""
    found = _JOB_ID.findall(output)
    return found[-1] if found else None


DEMO_MODES = ("reward", "agentic")
# The agentic demo is a streamlined rehearsal (notebook 03 runs twice as long): 64 tool-using rows, one
# epoch of the template's 16 prompts x 4 rollouts (4 steps) through the workspace's rollout function and its
# tool loop, enough to see the student start calling the tool.
AGENTIC_ROWS = {"train.jsonl": 64, "validation.jsonl": 16}
AGENTIC_HP = {"n_epochs": 1, "eval_steps": 2, "save_steps": 2}


def run_demo(
    directory: str | Path = "opd-demo", *, port: int = 0, mode: str = "reward", console: Any = None
) -> DemoResult:
    """Run the demo of `mode` (reward or agentic) in `directory` (created; must be new or empty)."""
    from rich.console import Console

    if mode not in DEMO_MODES:
        raise OpdError(
            f"unknown demo mode {mode!r}",
            fix=f"use one of: {', '.join(DEMO_MODES)} (e.g. opd demo --mode agentic)",
        )
    console = console or Console()
    started = time.monotonic()
    root = Path(directory).expanduser().resolve()
    if root.exists() and any(root.iterdir()):
        raise OpdError(f"{root} is not empty", fix="pass a new directory: opd demo ./somewhere-new")
    root.mkdir(parents=True, exist_ok=True)

    from opd_nb.workspace.new import create

    article = "an" if mode[0] in "aeiou" else "a"
    console.rule(f"[bold]1. Scaffold {article} {mode} workspace")
    ws = create(mode, root / f"{mode}-demo", name=f"{mode}-demo")
    console.print(f"workspace: {ws.path}", markup=False)
    sets: list[str] = []
    if mode == "agentic":
        sets = _streamline(Path(ws.path), console)

    from opd_nb.server import start

    console.rule("[bold]2. Start a local control plane")
    server = start(port=port, data_dir=root / ".opd-server")
    _exit_on_sigterm()  # so that `finally` stops the control plane when the demo is killed
    try:
        console.print(f"local control plane at {server.api_base}", markup=False)
        return _run_with_server(root, Path(ws.path), server, console, started, sets)
    finally:
        server.stop()
        console.print("local control plane stopped")


def _exit_on_sigterm() -> None:
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _streamline(ws: Path, console: Any) -> list[str]:
    """Keep the first rows of each data file (the full ones stay in data/full-*.jsonl); returns the
    ``--set`` arguments of a short job (the config file stays as scaffolded)."""
    for name, n in AGENTIC_ROWS.items():
        path = ws / "data" / name
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        path.rename(path.with_name(f"full-{name}"))
        path.write_text("".join(lines[:n]), encoding="utf-8")
    hp = ", ".join(f"{k}={v}" for k, v in AGENTIC_HP.items())
    console.print(f"streamlined rehearsal: {AGENTIC_ROWS['train.jsonl']} tool-using rows, {hp}", markup=False)
    return [arg for k, v in AGENTIC_HP.items() for arg in ("--set", f"training.hyper_parameters.{k}={v}")]


def _run_with_server(
    root: Path, ws: Path, server: Any, console: Any, started: float, sets: list[str]
) -> DemoResult:
    from opd_nb.checks import check
    from opd_nb.functions.testing import run_workspace_tests

    console.rule("[bold]3. Preflight checks (opd check --target local)")
    report = check(ws, target="local", base_url=server.api_base)
    console.print(report)
    if not report.ok:
        raise OpdError("the demo workspace has preflight errors (see above)", exit_code=1)

    console.rule("[bold]4. The workspace's own tests (pytest)")
    tests = run_workspace_tests(ws)
    console.print(tests)
    if not tests.ok:
        raise OpdError("the demo workspace's tests failed (see above)", exit_code=1)

    console.rule("[bold]5. Submit with the workspace's own submit_job.py --local")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    proc = subprocess.run(
        [sys.executable, "submit_job.py", "--local", server.api_base, *sets],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    console.print(proc.stdout.strip(), markup=False)
    job_id = parse_job_id(proc.stdout)
    if proc.returncode != 0 or not job_id:
        raise OpdError(
            f"submit_job.py failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}", exit_code=1
        )

    console.rule(f"[bold]6. Watch job {job_id}")
    from opd_nb.client import JobClient, resolve_target

    client = JobClient(resolve_target("local", base_url=server.api_base))
    job = _watch_with_progress(client, job_id, console)
    if job.status != SUCCEEDED:
        logs = client.logs(job_id, offset=0, lines=40).lines
        raise OpdError(f"job {job_id} ended {job.status}:\n" + "\n".join(logs[-40:]), exit_code=1)

    console.rule("[bold]7. Metrics")
    from rich.markup import escape

    from opd_nb.plots.png import render_png, summarize

    rows = client.metrics(job_id) or []
    summary = summarize(rows)
    console.print(_summary_table(summary))
    png_path = None
    png = render_png({job_id: rows}, title=f"{job_id} (local)")
    if png:
        png_path = root / f"{ws.name}-metrics.png"
        png_path.write_bytes(png)
        console.print(f"metric curves written to [bold]{escape(str(png_path))}[/bold]")
    result = DemoResult(
        workspace=ws,
        job_id=job_id,
        status=job.status,
        finetuned_output=job.finetuned_output,
        png=png_path,
        summary=summary,
        seconds=time.monotonic() - started,
    )
    console.rule("[bold green]Done")
    console.print(str(result), markup=False)
    return result


def _watch_with_progress(client: Any, job_id: str, console: Any) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),  # '?' while the total is unknown
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"{job_id} PENDING", total=None)

        def on_update(job: Any) -> None:
            total = job.progress.total_steps if job.progress else None
            step = job.progress.step if job.progress else None
            if total:
                progress.update(task, total=total)
            if step is not None:
                progress.update(task, completed=step)
            progress.update(task, description=f"{job_id} {job.status}")

        job = client.wait(job_id, poll_s=1.0, on_update=on_update)
        on_update(job)
    return job


def _summary_table(summary: list[dict[str, Any]]) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="metrics over the job")
    for column in ("metric", "first", "last", "min", "max", "points"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for row in summary:
        table.add_row(
            Text(row["metric"]),
            *(f"{row[c]:.4g}" for c in ("first", "last", "min", "max")),
            str(row["points"]),
        )
    return table
