"""The notebook views of experiments: a sweep's live monitor and a comparison of finished jobs.

`%opd sweep` opens the multi-job monitor (:class:`~opd_nb.notebook.monitor.JobMonitor`: the jobs'
curves overlaid, polled in the background) with the sweep's own table on top: which value went to
which job, and what each did with the functions. `%opd compare` shows the side-by-side table with
the compared metrics overlaid, as its snapshot alone (a comparison is final when shown). Like the
monitor, the sweep becomes its snapshot when its jobs end, and its widgets are only ever updated by
trait assignments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opd_nb.notebook.display import LiveView
from opd_nb.notebook.monitor import JobMonitor
from opd_nb.views import render

if TYPE_CHECKING:
    from opd_nb.experiments import Comparison, SweepResult


class SweepMonitor(JobMonitor):
    """The job monitor over a sweep's jobs, headed by the sweep's value → job table."""

    def __init__(self, sweep: SweepResult, client: Any = None, **kwargs: Any):
        super().__init__(sweep.job_ids, client, **kwargs)
        self.sweep = sweep
        self._header: Any = None

    def header_html(self) -> str:
        return render.box(self.sweep.html(), title=self.sweep._title())

    def to_html(self) -> str:
        return self.header_html() + super().to_html()

    def __str__(self) -> str:
        return str(self.sweep) + "\n" + super().__str__()

    def _drop_widgets(self) -> Any:
        self._header = None
        return super()._drop_widgets()

    def _ensure_widgets(self) -> dict[str, Any] | None:
        widgets = super()._ensure_widgets()
        if widgets is not None and self._header is None:
            import ipywidgets as W

            self._header = W.HTML(self.header_html())
            box = widgets["box"]
            box.children = (self._header, *box.children)
        if widgets is not None:
            widgets = {**widgets, "sweep": self._header}
        return widgets


class CompareView(LiveView):
    """A comparison's table (winner and notes included) and its overlaid curves.

    A comparison is complete when it is shown, so the view is :attr:`final` from the start: its output
    is the snapshot alone (the chart interactive with no kernel), in the live notebook and reopened."""

    def __init__(self, comparison: Comparison):
        from opd_nb.notebook.chart import MetricChart
        from opd_nb.plots.png import KEY_METRICS

        self.comparison = comparison
        self.chart = MetricChart()
        rows = {j.job_id: comparison.rows_by_job.get(j.job_id) or [] for j in comparison.jobs}
        self.chart.update(
            rows,
            [m for m in KEY_METRICS if m in comparison.metrics],
            labels={j.job_id: comparison.label(j, by_name=True) for j in comparison.jobs},
            offsets=comparison.step_offsets,
        )

    @property
    def final(self) -> bool:
        return True

    @property
    def state(self) -> dict[str, Any]:
        """What the view shows, as plain data (the comparison's JSON plus whether there are curves)."""
        return {**self.comparison.to_payload(), "has_plot": self.chart.feed.points > 0}

    def to_html(self) -> str:
        return render.box(
            self.comparison.html() + self.chart.to_html(), title=f"{len(self.comparison.jobs)} jobs compared"
        )

    def __str__(self) -> str:
        return str(self.comparison)
