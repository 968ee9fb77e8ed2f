"""`%opd traces JOB`: the trajectory view, and the trajectory pane of the rollout viewer's samples.

A waterfall of each traced call of a step (or of one rollout record: ``group``/``sample``), from
``JobClient.traces`` (the local control plane keeps the SDK's spans). Like the other views it displays
through :class:`~opd_nb.notebook.display.LiveView`: the widget while the kernel runs, and a static
snapshot (``trajectory_html`` plus ``static/trajectory.js``) that a saved notebook or its HTML export
still opens, span by span, with no kernel. On Bailian the spans go to ARMS: the view says to open the
console's Trajectory tab, and shows nothing it does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opd_nb.errors import OpdError
from opd_nb.notebook.display import LiveView, in_kernel
from opd_nb.notebook.follow import JobFollower
from opd_nb.notebook.snapshot import static_js
from opd_nb.notebook.trajectory_html import view_html, waterfall_html
from opd_nb.traces.ids import KINDS, SampleRef
from opd_nb.traces.page import CLOUD_NOTE, MAX_TRAJECTORIES, TracesPage
from opd_nb.views import render


def record_ref(record: Mapping[str, Any]) -> SampleRef | None:
    """The rollout record's name in the traces (kind, step, group, sample)."""
    try:
        return SampleRef(
            kind=record["kind"],
            step=int(record["step"]),
            group=int(record["group"]),
            sample=int(record["sample"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def record_pane_html(page: TracesPage | None, record: Mapping[str, Any]) -> str:
    """The rollout viewer's trajectory pane for one record (its rollout and reward calls' spans)."""
    if page is None:
        return f'<div class="opd-traj"><b>trajectory</b> <i>{render.esc(CLOUD_NOTE)}</i></div>'
    ref = record_ref(record)
    mine = page.of_sample(ref) if ref is not None else []
    empty = "no spans for this sample (a job traces its function calls when opd serve has opd-nb[tracing])"
    return f"<div><b>trajectory</b> (spans of its calls){waterfall_html(mine, empty=empty)}</div>"


def fetch(client: Any, job_id: str, step: int | None, kind: str | None = None) -> TracesPage | None:
    """A step's traces for a viewer; a control plane without them (Bailian) gives None."""
    if step is None:
        return None
    try:
        return client.traces(
            job_id, step=step, kind=kind, limit=MAX_TRAJECTORIES
        )  # each record finds its own
    except OpdError:
        return None


class TrajectoryView(LiveView):
    """One job's traced calls, one step at a time."""

    def __init__(
        self,
        job_id: str,
        client: Any = None,
        *,
        step: int | None = None,
        kind: str | None = None,
        group: int | None = None,
        sample: int | None = None,
        limit: int | None = None,
    ):
        if not job_id:
            raise OpdError("no job id given", fix="pass a job id, e.g. %opd traces ft-...")
        if kind not in (None, *KINDS):
            raise OpdError(f"kind must be train or validation, not {kind!r}")
        self.job_id, self._client, self.kind = job_id, client, kind
        self.group, self.sample, self.limit = group, sample, limit  # limit: trajectories kept per step
        self.page: TracesPage | None = None
        self.available: bool | None = None
        self._widgets: Any = None
        self._updating = False
        self.follower: JobFollower | None = None  # set once displayed in a kernel
        self.load(step)

    @property
    def client(self) -> Any:
        if self._client is None:
            from opd_nb.client import JobClient

            self._client = JobClient()
        return self._client

    def load(self, step: int | None = None) -> TrajectoryView:
        """Fetch `step` (None: the latest with spans)."""
        self.page = self.client.traces(
            self.job_id, step=step, kind=self.kind, group=self.group, sample=self.sample, limit=self.limit
        )
        self.available = self.page is not None
        self._sync()
        return self

    def refresh(self) -> TrajectoryView:
        page = self.page
        latest = page is None or page.step in (None, (page.steps or [None])[-1])
        return self.load(None if latest or page is None else page.step)

    def set_step(self, step: int) -> TrajectoryView:
        if self.page is not None and step not in self.page.steps:
            raise OpdError(
                f"step {step} has no spans", fix=f"steps with spans: {self.page.steps or 'none yet'}"
            )
        return self.load(step)

    @property
    def state(self) -> dict[str, Any]:
        """What the view shows, as plain data (tests read what users see)."""
        page = self.page
        return {
            "job_id": self.job_id,
            "available": self.available,
            "note": CLOUD_NOTE if self.available is False else None,
            "step": page.step if page else None,
            "steps": page.steps if page else [],
            "kind": self.kind,
            "group": self.group,
            "sample": self.sample,
            "metrics": dict(page.metrics) if page else {},
            "trajectories": len(page.trajectories) if page else 0,
            "total": page.total if page else None,  # before the limit: "100 of 128"
        }

    def to_html(self) -> str:
        trajs = self.page.trajectories if self.page else []
        return f'<div class="opd-snap">{view_html(self.state, trajs)}</div><script>{static_js("trajectory.js")}</script>'

    def __str__(self) -> str:
        if self.available is False:
            return f"traces of {self.job_id}: {CLOUD_NOTE}"
        return self.page.title() if self.page else f"traces of {self.job_id}"

    def as_of(self) -> str:
        step = self.page.step if self.page else None
        return f"step {step}" if step is not None else ""

    def __repr__(self) -> str:
        return f"TrajectoryView({self.job_id!r}, step={self.state['step']!r})"

    def _displayed(self) -> None:
        """On screen in a kernel: follow the job while it runs (new steps appear without a refresh)."""
        if self.follower is None and self.available and in_kernel():
            self.follower = JobFollower(self).start()

    def widget(self) -> Any:
        """A step selector, refresh, and the waterfall (its rows open as in the snapshot)."""
        if self._widgets is None:
            try:
                import ipywidgets as W
            except ImportError:
                return None
            step = W.Dropdown(description="step", layout=W.Layout(width="160px"))
            refresh = W.Button(description="refresh", icon="refresh", layout=W.Layout(width="auto"))
            body, message = W.HTML(), W.HTML()
            step.observe(
                lambda c: self._act(self.set_step, c["new"]) if c["new"] != self.state["step"] else None,
                "value",
            )
            refresh.on_click(lambda _b: self._act(self.refresh))
            box = W.VBox([W.HBox([step, refresh]), message, body])
            box.add_class("opd-trajectory-view")
            self._widgets = (box, step, body, message)
            self._sync()
        return self._widgets[0]

    def _act(self, fn: Any, *args: Any) -> None:
        if self._updating:
            return
        try:
            fn(*args)
            self._widgets[3].value = ""
        except OpdError as exc:
            self._widgets[3].value = render.box(f'<span class="bad">{render.esc(str(exc))}</span>')

    def _sync(self) -> None:
        if self._widgets is None:
            return
        _, step, body, _ = self._widgets
        state = self.state
        self._updating = True  # setting the dropdown must not load a step again
        try:
            step.options = [(str(s), s) for s in state["steps"]]
            step.value = state["step"] if state["step"] in state["steps"] else None
        finally:
            self._updating = False
        body.value = view_html(state, self.page.trajectories if self.page else [], scripted=False)
