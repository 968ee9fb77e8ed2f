"""`opd watch` in a terminal: a progress bar, the latest metrics, and the monitor's health alerts.

The metrics include the engine's diagnostics (teacher_kl, entropy, zero-variance groups, truncated
share); where a job's metrics have no truncation figure (agentic), the truncation rule reads the
latest step's recorded samples instead (``opd rollouts``).

The alerts come from ``opd_nb.health.rules``, the same rules the notebook's job monitor shows; each is
printed once, above the live view, when it first appears (a terminal scrolls, so repeating it on
every poll would bury the log). With ``--json`` stdout stays pure JSON and alerts go to stderr.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
from opd_nb.health.rules import AlertTracker, HealthAlert, job_alerts
from opd_nb.watching.contact import RECONNECT_MINUTES, Contact

if TYPE_CHECKING:
    from opd_nb.health.guard import Guard
    from opd_nb.trackers import Reporter
    from opd_nb.watching.meter import Meter
    from opd_nb.watching.notify import Notifier
    from opd_nb.watching.outbox import Outbox
    from opd_nb.wire.jobs import JobProgress

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
        eval_steps=job.plan.eval_steps,
        records=records,
    )
    return tracker.fresh(alerts)


@dataclass
class Hooks:
    """What a watcher does besides showing: guard (cancel on an error rule), notify (post to a webhook),
    meter (paid time); and how long it keeps trying when its control plane stops answering.

    The guard decides and cancels first; the notifications go out beside the loop (an
    :class:`~opd_nb.watching.outbox.Outbox`), so a slow webhook never delays a poll or a cancel."""

    guard: Guard | None = None
    notifier: Notifier | None = None
    meter: Meter | None = None
    reporter: Reporter | None = None  # --report-to: the job into the user's trackers (opd_nb.trackers)
    reconnect_s: float = RECONNECT_MINUTES * 60
    _outbox: Outbox | None = field(default=None, repr=False)

    @property
    def outbox(self) -> Outbox | None:
        """Where the notifications go (None without a webhook): queued, posted by a thread of their own."""
        if self.notifier is not None and (self._outbox is None or self._outbox.notifier is not self.notifier):
            from opd_nb.watching.outbox import Outbox

            self._outbox = Outbox(self.notifier)
        return self._outbox if self.notifier is not None else None

    def after_poll(
        self, job: Any, rows: Sequence[Mapping[str, Any]] | None, fresh: list[HealthAlert]
    ) -> list[str]:
        lines: list[str] = []
        said = self.guard.poll(job, rows) if self.guard is not None else []  # decided and cancelled first
        lines += said
        if (outbox := self.outbox) is not None:
            for alert in fresh:
                outbox.alert(job.job_id, alert)
            if said and self.guard is not None and self.guard.tripped is not None:
                outbox.alert(
                    job.job_id, HealthAlert("guard_cancel", "error", said[-1], f"opd logs {job.job_id}")
                )
            lines += outbox.take_lines()
        if self.reporter is not None:
            self.reporter.poll(job, rows, fresh)
            lines += self.reporter.take_lines()
        return lines

    def at_end(self, job: Any) -> list[str]:
        lines = [self.meter.final_line(job)] if self.meter is not None and self.meter.applies(job) else []
        if (outbox := self.outbox) is not None:
            tripped = self.guard.tripped if self.guard is not None else None
            extra = f"the guard cancelled it: rule {tripped.rule}" if tripped else ""
            outbox.final(job, extra)
            lines += outbox.flush()  # the final message still goes before the watcher exits
        if self.reporter is not None:
            self.reporter.end(job)
            lines += [*self.reporter.take_lines(), *self.reporter.where_lines()]
        return lines


@dataclass
class _Round:
    """One poll: the job, its metrics, the alerts new this time, and what the hooks said."""

    job: Any
    rows: Sequence[Mapping[str, Any]] | None
    fresh: list[HealthAlert]
    lines: list[str]


class _Polls:
    """The polls both watch loops make, each through :class:`Contact` (which outlasts a lost server)."""

    def __init__(self, client: Any, job_id: str, hooks: Hooks, report: Callable[[str], None]):
        self.client, self.job_id, self.hooks = client, job_id, hooks
        self.tracker = AlertTracker()
        self.samples = _Samples(client, job_id)
        where = f"the {client.target.kind} control plane at {client.target.base_url}"
        self.contact = Contact(job_id, where, hooks.reconnect_s, report, hooks.outbox)

    def _read(self) -> tuple[Any, Any, list[HealthAlert]]:
        job = self.client.get(self.job_id)
        rows = self.client.metrics(self.job_id)
        return job, rows, _fresh_alerts(self.tracker, job, rows, self.samples.latest(rows))

    def next(self) -> _Round | None:
        """This poll's round; None while contact is lost (the hooks' calls, a guard's cancel, go in a
        second read: the alerts already seen are shown even if that one finds the server gone)."""
        seen = self.contact.poll(self._read, status_of=lambda read: str(read[0].status))
        if seen is None:
            return None
        job, rows, fresh = seen
        lines = self.contact.poll(lambda: self.hooks.after_poll(job, rows, fresh))
        return _Round(job, rows, fresh, lines or [])

    def pause(self, poll_s: float) -> None:
        time.sleep(self.contact.pause_s(poll_s))


def _metrics_table(rows: Sequence[Mapping[str, Any]] | None) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="latest metrics", show_header=True, min_width=24)
    table.add_column("metric", overflow="fold")  # a narrow terminal wraps a long name, never cuts it
    table.add_column("value", justify="right", no_wrap=True)
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


def _steps_text(progress: JobProgress | None) -> str:
    """The progress bar's count: step/total, or what is known of it (a job can fail before a total)."""
    step, total = (progress.step, progress.total_steps) if progress else (None, None)
    if total:
        return f"{step or 0}/{total}"
    return f"step {step}" if step else "no step yet"


def watch_terminal(client: Any, job_id: str, hooks: Hooks | None = None) -> Any:
    """Rich progress bar plus the latest metrics until the job ends; alerts printed as they appear.

    The job id has a line of its own above the bar's (status, bar, step count, time left), so both fit
    a 40-column terminal whole."""
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.text import Text

    console = safe_console()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[steps]}"),
        TimeRemainingColumn(),
        console=console,
    )
    task = progress.add_task("", total=None, steps=_steps_text(None))
    hooks = hooks or Hooks()
    head = Text(job_id, style="bold")
    with Live(Group(head, progress, _metrics_table(None)), console=console, refresh_per_second=4) as live:

        def say(line: str, style: str = "bold red") -> None:
            live.console.print(Text(line, style=style), soft_wrap=True)

        polls = _Polls(client, job_id, hooks, lambda line: say(line, "bold yellow"))
        while (seen := polls.next()) is None or not seen.job.terminal:
            if seen is not None:
                _show(seen, progress, task, hooks, live, say)
            polls.pause(POLL_S)
        _show(seen, progress, task, hooks, live, say)
        for line in hooks.at_end(seen.job):
            say(line, "")
    if not console.is_terminal:  # rich ends its last frame with a newline only on a terminal
        console.line()
    return seen.job


def _show(seen: _Round, progress: Any, task: Any, hooks: Hooks, live: Any, say: Callable[..., None]) -> None:
    from rich.console import Group
    from rich.text import Text

    job, prog = seen.job, seen.job.progress
    progress.update(task, description=str(job.status), total=prog.total_steps if prog else None,
                    completed=prog.step if prog else 0, steps=_steps_text(prog))  # fmt: skip
    for alert in seen.fresh:
        say(alert_line(job.job_id, alert), "red" if alert.severity == "error" else "yellow")
    for line in seen.lines:
        say(line)
    meter = [Text(hooks.meter.line(job))] if hooks.meter is not None and hooks.meter.applies(job) else []
    live.update(Group(Text(job.job_id, style="bold"), progress, *meter, _metrics_table(seen.rows)))


def wait_reporting_alerts(
    client: Any, job_id: str, report: Callable[[str], None], hooks: Hooks | None = None, poll_s: float = 2.0
) -> Any:
    """Wait for the job to end (no live view); each new alert, and what the hooks say, goes to `report`."""
    hooks = hooks or Hooks()
    polls = _Polls(client, job_id, hooks, report)
    while (seen := polls.next()) is None or not seen.job.terminal:
        if seen is not None:
            for line in [alert_line(job_id, a) for a in seen.fresh] + seen.lines:
                report(line)
        polls.pause(poll_s)
    for line in [alert_line(job_id, a) for a in seen.fresh] + seen.lines + hooks.at_end(seen.job):
        report(line)
    return seen.job
