"""A job's full metric series, every point (`opd metrics JOB`, the agent's ``metric_series`` tool).

One core call for both front ends: the rows come from the client as every reader gets them, each
series is read by :func:`opd_nb.plots.series.series_points` (the chart's, the PNG's and the health
rules' one reading of metric rows), and a continued job can be placed at global steps by
:func:`opd_nb.plots.series.client_offsets`. Names a job does not have are summarised, never echoed
whole: an agent that asks for ten thousand made-up names gets one short line back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from opd_nb.plots.series import client_offsets, series_points
from opd_nb.results import ResultMixin

NO_METRICS = "this control plane (Bailian) has no metrics API; read the job in the console"
SHOWN_NAMES = 5  # names quoted in a line about unknown names; the rest are counted
NAME_CHARS = 60  # a quoted name longer than this is cut


def names_line(names: Sequence[str], shown: int = SHOWN_NAMES) -> str:
    """'a, b and 9,998 more': a few names, each cut to NAME_CHARS, and how many more (never all of them)."""
    quoted = [n if len(n) <= NAME_CHARS else n[: NAME_CHARS - 1] + "…" for n in names[:shown]]
    more = len(names) - len(quoted)
    return ", ".join(quoted) + (f" and {more:,} more" if more else "")


def numeric_names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every metric name with a number in some row, in order of first appearance (``step`` aside)."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(
            (k, None)
            for k, v in row.items()
            if k != "step" and isinstance(v, int | float) and not isinstance(v, bool)
        )
    return list(seen)


def unknown_note(unknown: Sequence[str]) -> str:
    """The one line about asked-for names this job has not reported (empty when none)."""
    if not unknown:
        return ""
    return f"{len(unknown):,} name(s) not in this job's metrics: {names_line(unknown)}"


class Series(BaseModel):
    name: str
    steps: list[float]
    values: list[float]


class JobSeries(ResultMixin, BaseModel):
    """Every point of a job's metrics (or of the names asked for), in step order."""

    job_id: str
    available: bool  # False: this control plane (Bailian) has no metrics API
    step_offset: float = 0.0  # added to every step (global steps of a continued job), else 0
    series: list[Series] = Field(default_factory=list)
    unknown: int = 0  # how many asked-for names the job has not reported
    note: str = ""

    def __str__(self) -> str:
        if not self.available:
            return f"{self.job_id}: {self.note}"
        lines = [self.note] if self.note else []
        if not self.series:
            return "\n".join([*lines, f"{self.job_id}: no metric points yet"])
        steps = sorted({s for one in self.series for s in one.steps})
        by_name = [dict(zip(one.steps, one.values, strict=True)) for one in self.series]
        lines.append("\t".join(["step", *(one.name for one in self.series)]))
        for step in steps:
            cells = [f"{v[step]:.6g}" if step in v else "" for v in by_name]
            lines.append("\t".join([f"{step:g}", *cells]))
        return "\n".join(lines)


def job_series(
    client: Any, job_id: str, names: Sequence[str] | None = None, *, global_steps: bool = False
) -> JobSeries:
    """The job's series through `client` (a :class:`opd_nb.client.JobClient`): `names` (default every
    metric), at the job's own steps or, with `global_steps`, after its parents' (a continued job)."""
    rows = client.metrics(job_id)
    if rows is None:
        return JobSeries(job_id=job_id, available=False, note=NO_METRICS)
    offset = 0.0
    if global_steps:
        offset = client_offsets(client, {job_id: client.get(job_id).model})[job_id]
    wanted = list(dict.fromkeys(names)) if names else numeric_names(rows)
    series, unknown = [], []
    for name in wanted:
        steps, values = series_points(rows, name)
        if values:
            series.append(Series(name=name, steps=[s + offset for s in steps], values=values))
        elif names:
            unknown.append(name)
    return JobSeries(job_id=job_id, available=True, step_offset=offset, series=series,
                     unknown=len(unknown), note=unknown_note(unknown))  # fmt: skip
