"""`%opd rollouts JOB`: the rollout viewer, the samples behind the curves.

A step selector, a kind filter (train samples, validation answers, or both), a samples table
(prompt, completion, reward, length, truncated, mean log-ratio) sortable by reward and by mean
log-ratio, and the selected sample: its completion with each token shaded by how much the teacher
disagrees (tooltip: both log-probs), the reward's score, metrics and error beside it.

It reads ``JobClient.rollouts`` (the local control plane's recorded rollouts), from a running job
(displayed in a kernel it follows new steps as they come, :mod:`~opd_nb.notebook.follow`) or a finished one. Every control change runs on the kernel's
own thread and only sets widget values. Its output (:class:`~opd_nb.notebook.display.LiveView`)
carries a static HTML snapshot next to the widget, so a frontend without widgets (or an export)
still shows the table and the selected sample, sortable and clickable with no kernel; a saved
notebook reopens the live widget from its saved widget state (JupyterLab's saveState, on in binder/). A control plane without the endpoint (Bailian) gets a note that the Bailian
console shows trajectories.
"""

from __future__ import annotations

from typing import Any

from opd_nb.client.rollout_results import CLOUD_NOTE, KINDS, SORTS, RolloutPage, sort_order, summary
from opd_nb.errors import OpdError
from opd_nb.notebook import rollout_html, trajectory_view
from opd_nb.notebook.display import LiveView, in_kernel
from opd_nb.notebook.follow import JobFollower
from opd_nb.notebook.snapshot import interactive
from opd_nb.traces.page import TracesPage

ALL = "all"  # the kind filter's "both kinds"


class RolloutViewer(LiveView):
    """One job's recorded rollouts, one step at a time."""

    def __init__(
        self,
        job_id: str,
        client: Any = None,
        *,
        step: int | None = None,
        kind: str | None = None,
        sort: str = "order",
        limit: int | None = None,
    ):
        if not job_id:
            raise OpdError("no job id given", fix="pass a job id, e.g. %opd rollouts ft-...")
        if kind not in (None, *KINDS):
            raise OpdError(f"kind must be train or validation, not {kind!r}")
        if sort not in SORTS:
            raise OpdError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
        self.job_id = job_id
        self._client = client
        self.kind = kind
        self.sort = sort
        self.limit = limit  # at most this many samples per step (the saved notebook keeps only these)
        self.page: RolloutPage | None = None
        self.traces: TracesPage | None = None
        self.available: bool | None = None  # False: this control plane has no rollouts endpoint
        self.selected: int | None = None
        self.loads = 0
        self._widgets: Any = None
        self.follower: JobFollower | None = None  # set once displayed in a kernel
        self.load(step)  # now, so that an unknown job is an error in the cell that asked

    # ------------------------------------------------------------------ data
    @property
    def client(self) -> Any:
        if self._client is None:
            from opd_nb.client import JobClient

            self._client = JobClient()
        return self._client

    @property
    def records(self) -> list[dict]:
        return self.page.rollouts if self.page is not None else []

    def load(self, step: int | None = None) -> RolloutViewer:
        """Fetch `step` (None: the latest recorded) of the current kind; selects the first row shown."""
        page = self.client.rollouts(self.job_id, step=step, kind=self.kind, limit=self.limit)
        self.loads += 1
        self.available = page is not None
        self.page = page
        self.traces = trajectory_view.fetch(self.client, self.job_id, self.step)  # each sample's spans
        order = self.order
        self.selected = order[0] if order else None
        self._sync()
        return self

    def refresh(self) -> RolloutViewer:
        """Reload (a running job has new steps): the latest step, or the same one if it was picked."""
        page = self.page
        follow = page is None or page.step is None or page.step == (self.steps or [None])[-1]
        return self.load(None if follow or page is None else page.step)

    @property
    def steps(self) -> list[int]:
        return list(self.page.steps) if self.page is not None else []

    @property
    def step(self) -> int | None:
        return self.page.step if self.page is not None else None

    @property
    def order(self) -> list[int]:
        """Record indices in the order the table shows them."""
        return sort_order(self.records, self.sort)

    # ------------------------------------------------------------- controls
    def set_step(self, step: int) -> RolloutViewer:
        if step not in self.steps:
            raise OpdError(
                f"step {step} has no recorded rollouts of kind {self.kind or ALL}",
                fix=f"recorded steps: {', '.join(map(str, self.steps)) or 'none yet'}",
            )
        return self.load(step)

    def set_kind(self, kind: str | None) -> RolloutViewer:
        """Filter by kind; stays on the same step when it has records of that kind, else the latest."""
        kind = None if kind == ALL else kind
        if kind not in (None, *KINDS):
            raise OpdError(f"kind must be train, validation or all, not {kind!r}")
        by_kind = self.page.steps_by_kind if self.page is not None else {}
        keep = self.step if kind is None or self.step in by_kind.get(kind, []) else None
        self.kind = kind
        return self.load(keep)

    def set_sort(self, sort: str) -> RolloutViewer:
        if sort not in SORTS:
            raise OpdError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
        self.sort = sort
        order = self.order
        self.selected = order[0] if order else None
        self._sync()
        return self

    def select(self, index: int) -> RolloutViewer:
        """Show record `index` (its position in the step's records, as the table's # column says)."""
        if not 0 <= index < len(self.records):
            raise OpdError(f"no sample #{index} at this step ({len(self.records)} recorded)")
        self.selected = index
        self._sync()
        return self

    # ------------------------------------------------------------ snapshot
    @property
    def state(self) -> dict[str, Any]:
        """A plain snapshot of what the viewer shows (tests read the same data users see)."""
        rows = []
        for i in self.order:
            s = summary(self.records[i])
            rows.append({"index": i, **{k: s[k] for k in _ROW_KEYS}})
        selected = None
        if self.selected is not None:
            rec = self.records[self.selected]
            selected = {
                "index": self.selected,
                **summary(rec),
                "reward_metrics": rec.get("reward_metrics") or {},
                "tokens": rec.get("tokens") or [],
            }
        note = CLOUD_NOTE if self.available is False else None
        return {
            "job_id": self.job_id,
            "available": self.available,
            "note": note,
            "step": self.step,
            "steps": self.steps,
            "steps_by_kind": dict(self.page.steps_by_kind) if self.page is not None else {},
            "kind": self.kind,
            "sort": self.sort,
            "sort_label": SORTS[self.sort],
            "order": self.order,
            "rows": rows,
            "selected": self.selected,
            "sample": selected,
        }

    def trajectory_html(self, index: int) -> str:
        """Record `index`'s trajectory: the spans of its rollout and reward calls (a waterfall)."""
        return trajectory_view.record_pane_html(self.traces, self.records[index])

    def to_html(self) -> str:
        return interactive(rollout_html.viewer_html(self.state, self.records, self.trajectory_html))

    def __str__(self) -> str:
        if self.available is False:
            return f"rollouts of {self.job_id}: {CLOUD_NOTE}"
        if self.page is None:
            return f"rollouts of {self.job_id}"
        head = self.page.title()  # one line: the full table is the HTML view's (or `opd rollouts`)
        if self.selected is None:
            return head
        s = summary(self.records[self.selected])
        return f"{head}\nselected #{self.selected}: reward {s['reward']} · {s['completion']!r}"

    def as_of(self) -> str:
        return f"step {self.step}" if self.step is not None else ""

    def __repr__(self) -> str:
        return f"RolloutViewer({self.job_id!r}, step={self.step!r}, kind={self.kind!r})"

    @property
    def final(self) -> bool:
        """A control plane without rollouts (Bailian): nothing to pick or refresh, only the note."""
        return self.available is False

    # ------------------------------------------------------------ widgets
    def _displayed(self) -> None:
        """On screen in a kernel: follow the job while it runs (new steps appear without a refresh)."""
        if self.follower is None and self.available and in_kernel():
            self.follower = JobFollower(self).start()

    def widget(self) -> Any:
        """The ipywidgets VBox (None without ipywidgets)."""
        if self._widgets is None:
            try:
                import ipywidgets as W
            except ImportError:
                return None
            from opd_nb.notebook.rollout_widgets import ViewerWidgets

            self._widgets = ViewerWidgets(W, self)
            self._sync()
        return self._widgets.box

    def _sync(self) -> None:
        if self._widgets is not None:
            self._widgets.update(self.state, self.records)


_ROW_KEYS = ("kind", "prompt", "completion", "reward", "length", "truncated", "mean_log_ratio")
