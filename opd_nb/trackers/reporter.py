"""One job into the user's trackers: metrics at global steps, config, samples, alerts, the end.

What `opd watch --report-to`, `opd report --to` and the monitor's ``report_to=`` share. A watcher
hands each poll to :meth:`Reporter.poll` (the job, its metric rows, the alerts that just appeared)
and the end to :meth:`Reporter.end`; `report_job` backfills a job in one pass through the same
calls. Rows are the job's ``/metrics`` as they are, so the trackers hold what the control plane
holds: each step is written once, at its final numbers (a live step's row grows in place until
`plots/series.py`'s `settled_rows` says it is done), in step order, so a streamed run equals the
backfill point for point. Each backend's run is the job's one run: a second report or a restarted
watch resumes or replaces it (each backend says which). On Bailian, which has no metrics API, a
reporter writes what a watcher can see there: the status, the error lines of the log as alerts, and
the final checkpoint list, and it says so.

A backend that fails while a job is watched is dropped with one line; the watch goes on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opd_nb.client.rollout_results import summary as sample_summary
from opd_nb.errors import OpdError
from opd_nb.health.guard import LOG_PAGE, log_error_alert
from opd_nb.health.rules import HealthAlert, best_checkpoint_line
from opd_nb.plots.series import MAX_PARENTS, client_offsets, parent_of, settled_rows
from opd_nb.trackers.backends import SAMPLE_COLUMNS, Backend, open_backend, require
from opd_nb.trackers.quiet import muted
from opd_nb.trackers.records import DEFAULT_PROJECT, STEP, ReportResult, RunInfo, job_config

NO_METRICS_NOTE = (
    "this control plane (Bailian) has no metrics API: reported the status, error lines of the log as "
    "alerts and the final checkpoint list, no metric curves or samples"
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def metric_values(row: Mapping[str, Any]) -> dict[str, float]:
    """A metric row's values under the docs' names (every finite number but the step)."""
    return {k: v for k, v in ((k, _number(v)) for k, v in row.items() if k != STEP) if v is not None}


def _root(client: Any, job: Any) -> tuple[str | None, str]:
    """(the job this one continues, the first job of its chain)."""
    parent, _ = parent_of(job.model)
    root, model, seen = job.job_id, job.model, {job.job_id}
    for _ in range(MAX_PARENTS):
        up, _ = parent_of(model)
        if up is None or up in seen:
            break
        seen.add(up)
        root = up
        try:
            model = client.get(up).model
        except OpdError:  # deleted, or another region: the chain is known up to here
            break
    return parent, root


def run_info(client: Any, job: Any, project: str = DEFAULT_PROJECT) -> RunInfo:
    """The tracker run of `job`: named by its id, grouped by its chain, its steps after its parent's."""
    parent, root = _root(client, job)
    offset = client_offsets(client, {job.job_id: job.model})[job.job_id] if parent else 0.0
    kind = client.target.kind
    return RunInfo(
        job_id=job.job_id,
        project=project,
        name=job.job_id,
        group=root,
        parent_job_id=parent,
        step_offset=int(offset),
        config={**job_config(job, kind), "parent_job_id": parent, "step_offset": int(offset)},
        target=kind,
    )


class Reporter:
    """Writes one job to every named backend; :meth:`take_lines` is what a watcher should show."""

    def __init__(
        self,
        client: Any,
        job_id: str,
        backends: Sequence[str],
        *,
        project: str = DEFAULT_PROJECT,
    ):
        for name in backends:  # a missing library is refused before anything is watched or written
            require(name)
        self.client, self.job_id, self.project = client, job_id, project
        self.names = list(backends)
        self._pending: list[str] = []
        self.run: RunInfo | None = None
        self.result = ReportResult(job_id=job_id, backends=self.names, status="")
        self._backends: list[Backend] = []
        self._through: int | None = None  # the last global step written (nothing is written at or below it)
        self._samples_asked_at: int | None = None  # the last step samples were asked for
        self._alert_rules: set[str] = set()
        self._log_offset = 1
        self._ended = False

    # ---------------------------------------------------------------- plumbing
    def _each(self, what: str, call: Callable[[Backend], None]) -> None:
        """`call` on every live backend, muted; one that raises is dropped with a line saying why."""
        for backend in list(self._backends):
            try:
                with muted():
                    call(backend)
            except Exception as exc:  # a tracker's own failure: the watch (or the other trackers) go on
                self._backends.remove(backend)
                line = f"report-to {backend.name}: {what} failed ({type(exc).__name__}: {exc}); not reporting to it"
                self.result.notes.append(line)
                self._pending.append(line)

    def open(self, job: Any) -> None:
        """Start a run in each backend (its library imported now: a missing one is an OpdError)."""
        self.run = run_info(self.client, job, self.project)
        with muted():  # importing a tracker sets up its loggers: they must not print for us either
            self._backends = [open_backend(name) for name in self.names]
        self._each("start", lambda b: b.start(self.run))  # pyright: ignore[reportArgumentType]

    # ---------------------------------------------------------------- what a poll brings
    def poll(
        self, job: Any, rows: Sequence[Mapping[str, Any]] | None, alerts: Iterable[HealthAlert] = ()
    ) -> None:
        """One watcher poll: new metric rows, new recorded samples, new alerts (log errors on Bailian)."""
        if self.run is None:
            self.open(job)
        if rows is None:
            try:
                alerts = [*alerts, *self._log_alerts()]
            except OpdError:  # the log could not be read this time: the next poll reads on from here
                pass
        else:
            self._write(rows)
        for alert in alerts:
            self._alert(alert, rows)

    def _write(self, rows: Sequence[Mapping[str, Any]], *, ended: bool = False) -> None:
        """The settled rows past the last step written, each step once and whole (its metrics, then its
        samples table), in step order. A row is written when its numbers are final (`settled_rows`: a
        live step's row grows in place), and nothing is written at or below a step already written: W&B
        drops it ("less than the current step"), and the others would hold the step twice."""
        run = self.run
        assert run is not None
        final = rows[: settled_rows(rows, ended=ended)]
        metrics = self._new_metrics(final)
        last = run.global_step(final[-1].get(STEP)) if final else None
        try:
            tables = self._new_samples(last, every=ended)
        except OpdError:  # samples not read this time: write nothing past them, the next poll writes both
            if not ended:
                return
            tables = {}
        for step in sorted(set(metrics) | set(tables)):
            if step in metrics:
                self._each("metrics", lambda b, s=step: b.log_metrics(s, metrics[s]))
                self.result.metric_rows += 1
                self.result.steps = [self.result.steps[0] if self.result.steps else step, step]
            if step in tables:
                self._each("samples", lambda b, s=step: b.log_samples(s, tables[s]))
                self.result.sample_tables += 1
            self._through = step

    def _new_metrics(self, final: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, float]]:
        """The values of each settled row past the last step written, by global step (read from the end
        back to that step: a poll costs its new rows)."""
        run = self.run
        assert run is not None
        out: dict[int, dict[str, float]] = {}
        for row in reversed(final):
            step = run.global_step(row.get(STEP))
            if step is None:
                continue
            if self._through is not None and step <= self._through:
                break
            values = metric_values(row)
            if values:
                out[step] = values
        return out

    def _new_samples(self, last: int | None, *, every: bool) -> dict[int, list[list[Any]]]:
        """Each recorded step past the last step written and up to `last` (any, with `every`), as a
        table; asked only when `last` moved, or `every`. A control plane without samples answers none."""
        run = self.run
        assert run is not None
        if not every and (last is None or last == self._samples_asked_at):
            return {}
        page = self.client.rollouts(self.job_id)
        tables: dict[int, list[list[Any]]] = {}
        if page is None:
            self._samples_asked_at = last
            return tables
        for step in page.steps:
            at = run.global_step(step)
            if at is None or (self._through is not None and at <= self._through):
                continue
            if not every and last is not None and at > last:  # not settled yet
                continue
            if step == page.step:
                records = page.rollouts
            else:
                other = self.client.rollouts(self.job_id, step=step)
                records = other.rollouts if other is not None else []
            if records:
                tables[at] = [[sample_summary(r).get(c) for c in SAMPLE_COLUMNS] for r in records]
        self._samples_asked_at = last  # read whole: the next poll asks again only when `last` moves
        return tables

    def _log_alerts(self) -> list[HealthAlert]:
        page = self.client.logs(self.job_id, offset=self._log_offset, lines=LOG_PAGE)
        self._log_offset = page.next_offset
        return [a for line in page.lines if (a := log_error_alert(line, self.job_id)) is not None]

    def _alert(self, alert: HealthAlert, rows: Sequence[Mapping[str, Any]] | None) -> None:
        key = alert.rule if alert.rule != "log_error" else alert.message
        if key in self._alert_rules:
            return
        self._alert_rules.add(key)
        step = self.run.global_step(rows[-1].get(STEP)) if rows else None  # pyright: ignore[reportOptionalMemberAccess]
        self._each("alert", lambda b: b.log_alert(step, alert))
        self.result.alerts += 1

    # ---------------------------------------------------------------- the end
    def end(self, job: Any) -> ReportResult:
        """The final status, the checkpoint list and the best one by the docs' rule; closes every run."""
        if self._ended:
            return self.result
        self._ended = True
        if self.run is None:
            self.open(job)
        rows = self.client.metrics(self.job_id)
        if rows is None:
            self.result.notes.append(NO_METRICS_NOTE)
            self._pending.append(NO_METRICS_NOTE)
        else:
            self._write(rows, ended=job.terminal)
        checkpoints = self.client.checkpoints(self.job_id)
        summary = {
            "last_step": self.result.steps[-1] if self.result.steps else None,
            "checkpoints": ", ".join(c.name for c in checkpoints or []) or "none listed",
            "best_checkpoint": best_checkpoint_line(checkpoints, rows),
        }
        self._each("finish", lambda b: b.finish(job.status, summary))
        self.result.status = job.status
        for backend in self._backends:
            self.result.where[backend.name] = backend.where()
        return self.result

    def take_lines(self) -> list[str]:
        """The lines not shown yet (a tracker that failed and was dropped)."""
        lines, self._pending = self._pending, []
        return lines

    def where_lines(self) -> list[str]:
        """What a watcher prints once the job ended: where each run is."""
        return [f"report-to {name}: {where}" for name, where in self.result.where.items()]


def report_job(
    client: Any,
    job_id: str,
    to: Sequence[str],
    *,
    project: str = DEFAULT_PROJECT,
) -> ReportResult:
    """Backfill: write a job (finished or not) to the trackers `to`, in one pass."""
    from opd_nb.health.rules import job_alerts

    reporter = Reporter(client, job_id, to, project=project)  # a missing tracker: refused before any request
    job = client.get(job_id)
    reporter.open(job)
    rows = client.metrics(job_id)  # None on Bailian: then only the status rule (and the log's errors)
    alerts = job_alerts(rows or [], status=job.status, job_id=job_id, eval_steps=job.plan.eval_steps)
    reporter.poll(job, rows, alerts)
    result = reporter.end(job)
    if not job.terminal:
        result.notes.append(f"{job_id} is still {job.status}: reported its settled steps (a running step's numbers "
                            f"still grow); `opd watch {job_id} --report-to {','.join(to)}` or a later `opd report` "
                            "goes on in the same run")  # fmt: skip
    return result
