"""`opd watch` in a terminal: a progress bar, the latest metrics, and the monitor's health alerts.

The metrics include the engine's diagnostics (teacher_kl, entropy, zero-variance groups, truncated
share); where a job's metrics have no truncation figure (agentic), the truncation rule reads the
latest step's recorded samples instead (``opd rollouts``).

The alerts come from ``opd_nb.health``, the same rules the notebook's job monitor shows; each is
printed once, above the live view, when it first appears (a terminal scrolls, so repeating it on
every poll would bury the log). With ``--json`` stdout stays pure JSON and alerts go to stderr.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opd_nb.cli._output import console as safe_console
from opd_nb.constants import (
    ENTROPY,
    LEARNING_RATE,
    LOSS,
    REWARD_MEAN,
    TEACHER_KL,
    TOKENS_PER_S,
    TRUNCATED_FRACTION,
    VALID_TOKEN_RATE,
    VALIDATION_ACCURACY,
    ZERO_VARIANCE_GROUPS,
)
from opd_nb.health import AlertTracker, HealthAlert, eval_steps_of, job_alerts

if TYPE_CHECKING:
    from opd_nb.guard import Guard
    from opd_nb.meter import Meter
    from opd_nb.notify import Notifier
    from opd_nb.trackers import Reporter

SHOWN_METRICS = (
    LOSS,
    VALID_TOKEN_RATE,
    TEACHER_KL,
    ENTROPY,
    VALIDATION_ACCURACY,
    REWARD_MEAN,
    ZERO_VARIANCE_GROUPS,
    TRUNCATED_FRACTION,
    LEARNING_RATE,
    TOKENS_PER_S,
)
POLL_S = 1.0


def alert_line(job_id: str, alert: HealthAlert) -> str:
    """How a terminal shows an alert: the monitor's wording, on one line."""
    return f"! {job_id}: {alert}"


class _Samples:
    """The latest step's recorded samples, for a job whose metrics lack a truncation figure (agentic).

    Fetched again only when a new step has metrics; never asked of a control plane without them.
    """

    def __init__(self, client: Any, job_id: str):
        self.client, self.job_id = client, job_id
        self.key: Any = None
        self.records: list[dict] = []

    def latest(self, rows: Sequence[Mapping[str, Any]] | None) -> list[dict] | None:
        if not rows or any(TRUNCATED_FRACTION in r for r in rows):
            return None
        key = rows[-1].get("step")
        if key != self.key:
            self.key = key
            page = self.client.rollouts(self.job_id, kind="train")
            self.records = list(page.rollouts) if page is not None else []
        return self.records


def _fresh_alerts(
    tracker: AlertTracker,
    job: Any,
    rows: Sequence[Mapping[str, Any]] | None,
    records: Sequence[Mapping[str, Any]] | None = None,
) -> list[HealthAlert]:
    alerts = job_alerts(
        rows or [],
        status=job.status,
        job_id=job.job_id,
        eval_steps=eval_steps_of(job.hyper_parameters),
        records=records,
    )
    return tracker.fresh(alerts)


@dataclass
class Hooks:
    """What a watcher does besides showing: guard (cancel on an error rule), notify (post to a webhook)."""

    guard: Guard | None = None
    notifier: Notifier | None = None
    meter: Meter | None = None
    reporter: Reporter | None = None  # --report-to: the job into the user's trackers (opd_nb.trackers)

    def after_poll(
        self, job: Any, rows: Sequence[Mapping[str, Any]] | None, fresh: list[HealthAlert]
    ) -> list[str]:
        lines: list[str] = []
        if self.notifier is not None:
            lines += [line for a in fresh if (line := self.notifier.alert(job.job_id, a))]
        if self.guard is not None:
            said = self.guard.poll(job, None if rows is None else list(rows))
            lines += said
            if self.notifier is not None and said and self.guard.tripped is not None:
                cancel = HealthAlert("guard_cancel", "error", said[-1], f"opd logs {job.job_id}")
                lines += [line for line in [self.notifier.alert(job.job_id, cancel)] if line]
        if self.reporter is not None:
            self.reporter.poll(job, rows, fresh)
            lines += self.reporter.take_lines()
        return lines

    def at_end(self, job: Any) -> list[str]:
        lines = [self.meter.final_line(job)] if self.meter is not None and self.meter.applies(job) else []
        if self.notifier is not None:
            tripped = self.guard.tripped if self.guard is not None else None
            extra = f"the guard cancelled it: rule {tripped.rule}" if tripped else ""
            lines += [line for line in [self.notifier.final(job, extra)] if line]
        if self.reporter is not None:
            self.reporter.end(job)
            lines += [*self.reporter.take_lines(), *self.reporter.where_lines()]
        return lines


def _metrics_table(rows: Sequence[Mapping[str, Any]] | None) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="latest metrics", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    last: dict[str, Any] = {}
    for row in rows or []:
        last.update({k: v for k, v in row.items() if v is not None})
    for key in SHOWN_METRICS:
        if key in last:
            value = last[key]
            table.add_row(Text(key), f"{value:.4g}" if isinstance(value, float) else Text(str(value)))
    if "step" in last:
        table.add_row("step", str(last["step"]))
    return table


def watch_terminal(client: Any, job_id: str, hooks: Hooks | None = None) -> Any:
    """Rich progress bar plus the latest metrics until the job ends; alerts printed as they appear."""
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.text import Text

    console = safe_console()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        console=console,
    )
    task = progress.add_task(job_id, total=None)
    hooks = hooks or Hooks()
    tracker = AlertTracker()
    samples = _Samples(client, job_id)
    with Live(Group(progress, _metrics_table(None)), console=console, refresh_per_second=4) as live:
        while True:
            job = client.get(job_id)
            rows = client.metrics(job_id)
            prog = job.progress or {}
            progress.update(
                task,
                description=f"{job_id} {job.status}",
                total=prog.get("total_steps"),
                completed=prog.get("step") or 0,
            )
            fresh = _fresh_alerts(tracker, job, rows, samples.latest(rows))
            for alert in fresh:
                style = "red" if alert.severity == "error" else "yellow"
                live.console.print(Text(alert_line(job_id, alert), style=style), soft_wrap=True)
            for line in hooks.after_poll(job, rows, fresh):
                live.console.print(Text(line, style="bold red"), soft_wrap=True)
            meter = (
                [Text(hooks.meter.line(job))] if hooks.meter is not None and hooks.meter.applies(job) else []
            )
            live.update(Group(progress, *meter, _metrics_table(rows)))
            if job.terminal:
                for line in hooks.at_end(job):
                    live.console.print(Text(line), soft_wrap=True)
                return job
            time.sleep(POLL_S)


def wait_reporting_alerts(
    client: Any, job_id: str, report: Callable[[str], None], hooks: Hooks | None = None, poll_s: float = 2.0
) -> Any:
    """Wait for the job to end (no live view); each new alert, and what the hooks say, goes to `report`."""
    tracker = AlertTracker()
    samples = _Samples(client, job_id)
    hooks = hooks or Hooks()

    def on_update(job: Any) -> None:
        rows = client.metrics(job_id)
        fresh = _fresh_alerts(tracker, job, rows, samples.latest(rows))
        for alert in fresh:
            report(alert_line(job_id, alert))
        for line in hooks.after_poll(job, rows, fresh):
            report(line)

    job = client.wait(job_id, on_update=on_update, poll_s=poll_s)
    for line in hooks.at_end(job):
        report(line)
    return job
