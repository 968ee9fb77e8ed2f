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
DEFAULT_TRAJECTORIES = 100  # what one answer holds when `limit` is not given (the API's, `opd traces`')
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
    total: int | None = None  # the step's (or sample's) trajectories before `limit` cut them; None: not said
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

    def count_line(self) -> str:
        """'100 of 128 trajectories' when a limit cut them, else '128 trajectories'."""
        return count_line(len(self.trajectories), self.total)

    def title(self) -> str:
        if self.step is None:
            return f"traces of {self.job_id}: none received yet"
        errors = sum(t.errors for t in self.trajectories)
        return (
            f"traces of {self.job_id} · step {self.step} ({self.kind or 'train and validation'}) · "
            f"{self.count_line()}, {errors} failed span(s)"
        )

    def __str__(self) -> str:
        lines = [self.title()]
        if self.metrics:
            lines.append("  " + " · ".join(f"{k} {v:.3g}" for k, v in sorted(self.metrics.items())))
        for t in self.trajectories:
            lines.extend(trajectory_lines(t))
        return "\n".join(lines)


def count_line(shown: int, total: int | None) -> str:
    """How many trajectories are shown, and of how many when that is more (never a cut list as whole)."""
    noun = "trajectory" if (total or shown) == 1 else "trajectories"
    if total is not None and total > shown:
        return f"{shown} of {total} {noun} (raise the limit to see more)"
    return f"{shown} {noun}"


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
