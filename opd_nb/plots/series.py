"""The data behind an interactive metric chart: series per (job, metric), global steps, downsampling
and per-poll deltas.

Why a module of its own: the monitor, compare and sweep draw the same chart, live (an anywidget fed
only the new points of each poll) and saved (a self-contained page with every point it shows), and
both must agree on which points exist. Pure functions of metric rows, no widget import, so the
terminal, the bench and the tests use them as they are.

A *continued* job (its model is ``opd-local/<parent>`` or one of the parent's checkpoints) counts
its steps from 1 again; :func:`step_offset` says where its parent stopped, so the chart can place it
after its parent (global steps) or align every job at 0.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opd_nb.constants import EPOCH, LOCAL_OUTPUT_PREFIX

MAX_POINTS = 2000  # per series in a snapshot; beyond it the series is downsampled (LTTB)
MAX_PARENTS = 8  # how far back a chain of continued jobs is followed
SETTLED_AFTER = 2  # a live step's row is final once the engine has written this many later steps
# One colour per job, in order of first appearance; mid-luminance hues that read on white and on dark
# themes. The interactive chart (static/chart.js) takes them from the document, the static SVG too.
PALETTE = (
    "#3b82f6", "#f97316", "#10b981", "#ef4444", "#8b5cf6", "#06b6d4", "#ec4899", "#84cc16", "#d97706", "#64748b",
)  # fmt: skip
_CHECKPOINT = re.compile(r"(?:^|[/:])checkpoint-(\d+)(?:/|$)")
_JOB_ID = re.compile(r"\bft-[0-9]{12}-[0-9a-f]{6}\b")

Rows = Sequence[Mapping[str, Any]]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def series_points(rows: Rows, metric: str, *, first_index: int = 0) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric in step order, skipping rows where it is absent or not finite (a
    row without a step counts as step `first_index + i + 1`)."""
    pairs = []
    for i, row in enumerate(rows, start=first_index):
        value = _number(row.get(metric))
        step = _number(row.get("step"))
        if value is not None:
            pairs.append((step if step is not None else float(i + 1), value))
    pairs.sort(key=lambda p: p[0])
    return [p[0] for p in pairs], [p[1] for p in pairs]


def lttb(steps: Sequence[float], values: Sequence[float], n: int) -> tuple[list[float], list[float]]:
    """Largest-triangle-three-buckets: `n` of the points that keep the curve's visible shape (its peaks
    and dips), first and last included. Steinarsson's algorithm; a series of ≤ n points is returned whole."""
    size = len(steps)
    if n >= size or n < 3:
        return list(steps), list(values)
    out_s, out_v = [steps[0]], [values[0]]
    every = (size - 2) / (n - 2)
    a = 0
    for i in range(n - 2):
        lo, hi = int(i * every) + 1, int((i + 1) * every) + 1
        nxt_lo, nxt_hi = hi, min(int((i + 2) * every) + 1, size)
        span = max(nxt_hi - nxt_lo, 1)
        avg_s = sum(steps[nxt_lo:nxt_hi]) / span if nxt_hi > nxt_lo else steps[-1]
        avg_v = sum(values[nxt_lo:nxt_hi]) / span if nxt_hi > nxt_lo else values[-1]
        ax, av = steps[a], values[a]
        best, best_area = lo, -1.0
        for j in range(lo, min(hi, size - 1)):
            area = abs((ax - avg_s) * (values[j] - av) - (ax - steps[j]) * (avg_v - av))
            if area > best_area:
                best, best_area = j, area
        out_s.append(steps[best])
        out_v.append(values[best])
        a = best
    out_s.append(steps[-1])
    out_v.append(values[-1])
    return out_s, out_v


def parent_of(model: str | None) -> tuple[str | None, float | None]:
    """(parent job id, checkpoint step or None) of a job's model id: ``opd-local/<job>`` continues the
    parent's final checkpoint, a checkpoint path or id (``<job>:checkpoint-N``, ``…/<job>/…/checkpoint-N``)
    continues step N. (None, None) for a base model."""
    if not model:
        return None, None
    if model.startswith(LOCAL_OUTPUT_PREFIX):
        job = model[len(LOCAL_OUTPUT_PREFIX) :].split("/", 1)[0]
        return (job or None), None
    found = _JOB_ID.search(model)
    step = _CHECKPOINT.search(model)
    if found is None:
        return None, None
    return found.group(0), (float(step.group(1)) if step else None)


def step_offset(
    model: str | None,
    last_step: Callable[[str], float | None],
    model_of: Callable[[str], str | None],
) -> float:
    """Where a continued job's step 1 lies on its parent's axis: the parent's own offset plus the
    checkpoint's step (or the parent's last step, for its final checkpoint). `last_step(job)` and
    `model_of(job)` look the parent up (None when unknown: that link adds nothing)."""
    offset, seen = 0.0, set()
    for _ in range(MAX_PARENTS):
        parent, step = parent_of(model)
        if parent is None or parent in seen:
            break
        seen.add(parent)
        here = step if step is not None else last_step(parent)
        if here is None:
            break
        offset += here
        model = model_of(parent)
    return offset


def settled_rows(rows: Rows, *, ended: bool) -> int:
    """How many of a job's leading rows hold their final numbers: every row once the job has ended, else
    the rows before the engine's `SETTLED_AFTER`-th last row. A step's row grows in place while it runs
    (its trace numbers are running totals of the spans in so far, the engine's numbers join when it ends,
    a refused export's count goes into the last finished step), so what must be written once, at its
    final value (a tracker run), is written only when the engine has finished two later steps."""
    if ended:
        return len(rows)
    seen = 0
    for i in range(len(rows) - 1, -1, -1):
        if EPOCH in rows[i]:
            seen += 1
            if seen == SETTLED_AFTER:
                return i
    return 0


@dataclass
class RowCursor:
    """Which of one job's metric rows are new, grew or may still change since the last read: the rule of a reader that
    redraws what changed (the chart feed; what is written once, a tracker run, waits for `settled_rows`
    instead). A step's row grows in place (its trace
    numbers arrive while the step runs, the engine's when it ends), so a row is read again when its key
    count changed; a shorter list is another history (it restarted) and is read from the start."""

    _sizes: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        """How many rows the last read saw."""
        return len(self._sizes)

    def advance(self, rows: Rows) -> tuple[int, bool]:
        """(the index of the first row that is new, grew, or is not settled yet since the last call,
        whether the list restarted). A row not yet settled (`settled_rows`) is read again on every call:
        its trace numbers are running totals that change value without adding keys; only a few such
        rows exist at the end of a list, so a poll still costs what may have changed."""
        sizes = [len(row) for row in rows]
        restarted = len(sizes) < len(self._sizes)
        read = [] if restarted else self._sizes
        first = next((i for i, n in enumerate(read) if sizes[i] != n), len(read))
        self._sizes = sizes
        return min(first, settled_rows(rows, ended=False)), restarted


@dataclass
class ChartFeed:
    """What one chart has been given, so each poll sends only the points it has not seen.

    `panels` is the metric order; labels and offsets are per job (a legend name; the global-step
    offset of a continued job). `full()` is everything as one chart document (downsampled past
    `max_points` per series, and saying so); `delta()` the points after each series' last sent step."""

    title: str | None = None
    max_points: int = MAX_POINTS
    panels: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    offsets: dict[str, float] = field(default_factory=dict)
    _sent: dict[tuple[str, str], float] = field(default_factory=dict)
    _series: dict[tuple[str, str], tuple[list[float], list[float]]] = field(default_factory=dict)
    _cursors: dict[str, RowCursor] = field(default_factory=dict)  # what was read of each job
    _changed: dict[tuple[str, str], dict[float, float]] = field(default_factory=dict)  # sent, then changed

    def offset(self, job: str) -> float:
        """The global-step offset `job`'s series are drawn at: 0 until a parent is found."""
        return self.offsets.get(job, 0.0)

    def update(self, rows_by_job: Mapping[str, Rows], panels: Sequence[str]) -> None:
        """Take the latest rows of every job (the whole list each time, as the client returns it).

        Only new rows, and rows that gained keys since they were read, are parsed: a step's row grows
        in place (its trace numbers arrive while the step runs, the engine's numbers when it ends), so a
        poll costs what changed, not the job's length; a new panel reads that metric's rows once."""
        added = [name for name in panels if name not in self.panels]
        self.panels.extend(added)
        for job, rows in rows_by_job.items():
            cursor = self._cursors.setdefault(job, RowCursor())
            read_before = len(cursor)
            seen, restarted = cursor.advance(rows)
            if restarted:  # not the same job history any more
                read_before = 0
                for key in [k for k in self._series if k[0] == job]:
                    del self._series[key]
            for metric in self.panels:
                start = 0 if metric in added else seen
                if start < len(rows):
                    self._take(job, metric, rows, start, reread=start < read_before)

    def _take(self, job: str, metric: str, rows: Rows, start: int, *, reread: bool) -> None:
        """Parse `metric` from rows[start:], replacing the points of any step read before (`reread`)."""
        steps, values = series_points(rows[start:], metric, first_index=start)
        have = self._series.get((job, metric))
        if have is not None and reread:  # rows read before: drop their points
            redo = set(steps)
            sent = self._sent.get((job, metric), -math.inf)
            new = dict(zip(steps, values, strict=True))
            changed = self._changed.setdefault((job, metric), {})
            for step, value in zip(*have, strict=True):  # a point already drawn that changed: send it again
                if step in redo and step <= sent and new[step] != value:
                    changed[step] = new[step]
            kept = [(s, v) for s, v in zip(*have, strict=True) if s not in redo]
            have[0][:], have[1][:] = [p[0] for p in kept], [p[1] for p in kept]
        if not steps:
            return
        have_s, have_v = self._series.setdefault((job, metric), ([], []))
        if have_s and steps[0] <= have_s[-1]:  # out of order: re-sort this series
            pairs = sorted(zip(have_s + steps, have_v + values, strict=True))
            have_s[:] = [p[0] for p in pairs]
            have_v[:] = [p[1] for p in pairs]
        else:
            have_s.extend(steps)
            have_v.extend(values)

    def delta(self) -> list[dict[str, Any]]:
        """The points no earlier delta (or full document) included, one entry per series that grew, and
        before them an entry marked ``replace`` with the new values of points already sent that changed (a
        live step's running totals)."""
        out = []
        for key, changed in self._changed.items():
            if changed:
                steps = sorted(changed)
                out.append({**self._entry(*key, steps, [changed[s] for s in steps]), "replace": True})
        self._changed.clear()
        for (job, metric), (steps, values) in self._series.items():
            last = self._sent.get((job, metric), -math.inf)
            start = bisect.bisect_right(steps, last)
            if start < len(steps):
                out.append(self._entry(job, metric, steps[start:], values[start:]))
                self._sent[(job, metric)] = steps[-1]
        return out

    def full(self, *, mark: bool = True) -> dict[str, Any]:
        """The whole chart as one JSON-ready document; `mark`: count every point as sent (the next
        delta starts after them)."""
        series, cut = [], []
        for (job, metric), (steps, values) in self._series.items():
            shown_s, shown_v = lttb(steps, values, self.max_points)
            if len(shown_s) < len(steps):
                cut.append(len(steps))
            series.append(self._entry(job, metric, shown_s, shown_v))
            if mark:
                self._sent[(job, metric)] = steps[-1]
        if mark:
            self._changed.clear()  # the document holds every point's latest value
        note = None
        if cut:
            note = (
                f"downsampled for display (LTTB): {self.max_points:,} points per series of up to "
                f"{max(cut):,}; hover values are of the points shown"
            )
        return {
            "title": self.title,
            "panels": list(self.panels),
            "series": series,
            "note": note,
            "palette": list(PALETTE),
        }

    def _entry(self, job: str, metric: str, steps: list[float], values: list[float]) -> dict[str, Any]:
        return {
            "job": job,
            "label": self.labels.get(job, job),
            "metric": metric,
            "offset": self.offset(job),
            "steps": [int(s) if s.is_integer() else s for s in steps],
            "values": [round(v, 6) if abs(v) >= 1e-3 else float(f"{v:.4g}") for v in values],
        }

    @property
    def points(self) -> int:
        """Raw points held over every series (what the chart would show undownsampled)."""
        return sum(len(s) for s, _ in self._series.values())


def client_offsets(client: Any, models: Mapping[str, str | None]) -> dict[str, float]:
    """The global-step offset of each job (by its model id), looking parents up through `client`
    (``get`` and ``metrics``, as :class:`opd_nb.client.JobClient` has them). A parent the control plane
    cannot show (deleted, another region, no metrics API) adds nothing rather than failing the chart."""
    steps: dict[str, float | None] = {}
    parents: dict[str, str | None] = {}

    def last_step(job_id: str) -> float | None:
        if job_id not in steps:
            try:
                rows = client.metrics(job_id) or []
            except Exception:  # a chart is never worth an error: the job is drawn from step 0
                rows = []
            found = [s for s in (_number(r.get("step")) for r in rows) if s is not None]
            steps[job_id] = max(found) if found else None
        return steps[job_id]

    def model_of(job_id: str) -> str | None:
        if job_id not in parents:
            try:
                parents[job_id] = getattr(client.get(job_id), "model", None)
            except Exception:
                parents[job_id] = None
        return parents[job_id]

    return {job: step_offset(model, last_step, model_of) for job, model in models.items()}
