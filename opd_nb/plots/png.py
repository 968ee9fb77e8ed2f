"""Metric curves as PNG bytes, shared by the job monitor, the demo and the notebooks.

Uses matplotlib's object API (``Figure`` + Agg canvas), never ``pyplot``: no global state, safe
from the monitor's background thread, and no GUI backend is ever selected.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from opd_nb.constants import (
    LLM_CALLS_PER_TRAJECTORY,
    LOSS,
    REWARD_MEAN,
    REWARD_METRIC_PREFIX,
    ROLLOUT_METRIC_PREFIX,
    TOOL_ERROR_RATE,
    TOOL_LATENCY_P95,
    VALID_TOKEN_RATE,
)
from opd_nb.plots.series import series_points

TRACE_PANELS = (
    TOOL_LATENCY_P95,
    TOOL_ERROR_RATE,
    LLM_CALLS_PER_TRAJECTORY,
)  # from the SDK's spans (opd serve)

KEY_METRICS = (LOSS, VALID_TOKEN_RATE, REWARD_MEAN)


def metric_series(rows: Sequence[Mapping[str, Any]], name: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric, skipping rows where it is absent or not a finite number: the one
    reading of metric rows that the PNG, the health rules and the interactive chart share."""
    return series_points(rows, name)


def panel_names(rows_by_job: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """The metrics worth a panel: the docs' key metrics, then each reward metric and each rollout metric
    (an agentic job's ``tool_calls``, ``turns``, ...), then what a traced job's spans say, if present."""
    present: set[str] = set()
    for rows in rows_by_job.values():
        for row in rows:
            present.update(
                k for k, v in row.items() if isinstance(v, int | float) and not isinstance(v, bool)
            )
    names = [m for m in KEY_METRICS if m in present]
    names += sorted(k for k in present if k.startswith(REWARD_METRIC_PREFIX))
    names += sorted(k for k in present if k.startswith(ROLLOUT_METRIC_PREFIX))
    names += [m for m in TRACE_PANELS if m in present]
    return names


def render_png(
    rows_by_job: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    names: Sequence[str] | None = None,
    title: str | None = None,
    dpi: int = 90,
) -> bytes | None:
    """One panel per metric, one line per job; None when there is nothing to plot yet."""
    names = list(names) if names is not None else panel_names(rows_by_job)
    if not names:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = min(len(names), 3)
    nrows = math.ceil(len(names) / cols)
    fig = Figure(figsize=(4.2 * cols, 2.8 * nrows), dpi=dpi)
    FigureCanvasAgg(fig)
    for index, name in enumerate(names):
        ax = fig.add_subplot(nrows, cols, index + 1)
        for job_id, rows in rows_by_job.items():
            steps, values = metric_series(rows, name)
            if steps:
                ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=job_id)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if len(rows_by_job) > 1:
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def summarize(rows: Sequence[Mapping[str, Any]], names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """first / last / min / max of each metric, for summary tables."""
    names = list(names) if names is not None else panel_names({"job": rows})
    table = []
    for name in names:
        steps, values = metric_series(rows, name)
        if values:
            table.append(
                {
                    "metric": name,
                    "first": values[0],
                    "last": values[-1],
                    "min": min(values),
                    "max": max(values),
                    "points": len(values),
                }
            )
    return table
