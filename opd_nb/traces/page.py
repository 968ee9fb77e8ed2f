"""One answer of ``GET /fine-tunes/{id}/traces``: a step's trajectories (span trees) and their numbers.

The control plane builds it, the client reads it back (``JobClient.traces``), ``opd traces`` prints it
as a tree (durations, status, key attributes) and the notebook draws it as a waterfall.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from opd_nb.results import ResultMixin
from opd_nb.traces.facts import facts, one_line
from opd_nb.traces.ids import SampleRef
from opd_nb.traces.spans import SpanNode, Trajectory

MAX_TRAJECTORIES = 1000  # the most one answer holds (the API's cap on `limit`)
CLOUD_NOTE = (
    "This control plane keeps no traces (Bailian): the SDK's spans go to ARMS, and the Bailian console "
    "shows them in the job's Trajectory tab."
)


class TracesPage(BaseModel, ResultMixin):
    """The traced calls of one step (filtered to one rollout sample when asked)."""

    job_id: str
    step: int | None = None
    kind: str | None = None  # the kind asked for (None: both)
    steps_by_kind: dict[str, list[int]] = Field(default_factory=dict)
    trajectories: list[Trajectory] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict)  # the step's trace metrics (train steps)

    @property
    def steps(self) -> list[int]:
        return sorted({s for v in self.steps_by_kind.values() for s in v})

    def of_sample(self, ref: SampleRef) -> list[Trajectory]:
        """The trajectories of one rollout record (its rollout call, then its reward calls)."""
        return [
            t
            for t in self.trajectories
            if t.sample is not None
            and (t.sample.kind, t.sample.step, t.sample.group, t.sample.sample)
            == (ref.kind, ref.step, ref.group, ref.sample)
        ]

    def title(self) -> str:
        if self.step is None:
            return f"traces of {self.job_id}: none received yet"
        errors = sum(t.errors for t in self.trajectories)
        return (
            f"traces of {self.job_id} · step {self.step} ({self.kind or 'train and validation'}) · "
            f"{len(self.trajectories)} trajector{'y' if len(self.trajectories) == 1 else 'ies'}, {errors} failed span(s)"
        )

    def __str__(self) -> str:
        lines = [self.title()]
        if self.metrics:
            lines.append("  " + " · ".join(f"{k} {v:.3g}" for k, v in sorted(self.metrics.items())))
        for t in self.trajectories:
            lines.extend(trajectory_lines(t))
        return "\n".join(lines)


def trajectory_lines(t: Trajectory) -> list[str]:
    """A trajectory as an indented tree, one span a line (user text on one line: ⏎ for newlines)."""
    where = t.sample.label() if t.sample else "not tied to a rollout sample"
    errors = f" · {t.errors} error(s)" if t.errors else ""
    lines = [f"\ntrace {t.trace_id[:16]} · {where} · {t.duration_ms:.1f} ms · {t.spans} span(s){errors}"]
    for depth, node in t.nodes():
        lines.append("  " * (depth + 1) + node_line(node))
    return lines


def node_line(node: SpanNode) -> str:
    s = node.span
    status = "ERROR" if s.failed else s.status
    marks = " SLOW" if node.slow else ""
    kind = f" [{s.kind}]" if s.kind else ""
    shown = "  ".join(f"{k}={v}" for k, v in facts(s))
    return f"{one_line(s.name, 60)}{kind} {s.duration_ms:.1f} ms {status}{marks}" + (
        f"  {shown}" if shown else ""
    )
