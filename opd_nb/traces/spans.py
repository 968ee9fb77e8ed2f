"""Spans as the local control plane keeps them, and the call tree of one rollout sample.

A :class:`Span` is one OTLP span flattened to what a reader needs (ids, name, the SDK's logical kind,
start, duration, status, attributes, events); the control plane stores them per job and step and
answers them as :class:`Trajectory` trees, one per traced call, tied to its rollout record by the
ids in :mod:`opd_nb.traces.ids`. Pure pydantic, no OpenTelemetry import: the client and the notebook
read the same models.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from opd_nb.traces.ids import SampleRef, of_attributes

SPAN_KIND_KEY = "gen_ai.span.kind"  # CHAIN, ROLLOUT, REWARD, LLM, TOOL (the SDK's logical kind)
OPERATION_KEY = "gen_ai.operation.name"
Status = Literal["ok", "error", "unset"]
# A span (not a trajectory's root, nor one that only wraps its children) is "slow" when it takes SLOW_FLOOR_MS or more and either SLOW_FACTOR times
# the median of the step's spans of the same name (3 or more of them), or else SLOW_SHARE of its trajectory.
SLOW_FLOOR_MS = 100.0
SLOW_FACTOR = 2.0
SLOW_SHARE = 0.5


class SpanEvent(BaseModel):
    """A span's event (an exception the SDK recorded, with its type, message and stack)."""

    name: str
    time_ms: float = 0.0
    attributes: dict[str, Any] = Field(default_factory=dict)


class Span(BaseModel):
    """One finished span (times in milliseconds since the Unix epoch)."""

    model_config = ConfigDict(extra="ignore")

    trace_id: str
    span_id: str
    parent_id: str | None = None
    name: str
    kind: str = ""  # the SDK's logical kind (gen_ai.span.kind), upper case; "" when it set none
    start_ms: float
    duration_ms: float
    status: Status = "unset"
    status_message: str = ""
    attributes: dict[str, Any] = Field(default_factory=dict)
    events: list[SpanEvent] = Field(default_factory=list)
    service: str = ""  # the resource's service.name

    @property
    def failed(self) -> bool:
        return self.status == "error"

    def sample(self) -> SampleRef | None:
        return of_attributes(self.attributes)


def logical_kind(attributes: Mapping[str, Any], name: str) -> str:
    """The SDK's logical kind of a span (``gen_ai.span.kind``), else one read from its operation or name."""
    kind = str(attributes.get(SPAN_KIND_KEY) or "").upper()
    if kind:
        return kind
    op = str(attributes.get(OPERATION_KEY) or name.partition(" ")[0]).lower()
    if op == "execute_tool":
        return "TOOL"
    if op in ("chat", "text_completion", "generate_content", "completion"):
        return "LLM"
    return ""


class SpanNode(BaseModel):
    """A span with its children, in start order; ``slow``: it took a large share of its trajectory."""

    span: Span
    slow: bool = False
    children: list[SpanNode] = Field(default_factory=list)

    def walk(self) -> Iterable[tuple[int, SpanNode]]:
        """(depth, node) for this node and every descendant, depth first, in start order."""
        stack: list[tuple[int, SpanNode]] = [(0, self)]
        while stack:
            depth, node = stack.pop()
            yield depth, node
            stack.extend((depth + 1, c) for c in reversed(node.children))


class Trajectory(BaseModel):
    """One traced call (one trace): its span tree and the rollout record it belongs to."""

    trace_id: str
    sample: SampleRef | None = None
    start_ms: float
    duration_ms: float
    spans: int
    errors: int
    roots: list[SpanNode]

    def nodes(self) -> Iterable[tuple[int, SpanNode]]:
        for root in self.roots:
            yield from root.walk()


def trajectories(spans: Iterable[Span], peers: Mapping[str, list[float]] | None = None) -> list[Trajectory]:
    """The spans grouped by trace into trees (children by parent id; a span whose parent was not received
    is a root of its own), ordered by start; a failed span is kept as it came, its tree marks the slow.

    `peers`: the step's :func:`peer_durations`, when `spans` are only some of its calls (a page read
    through a step's index): a span is slow beside every peer of the step, not only the ones shown."""
    by_trace: dict[str, list[Span]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    out = [trajectory(trace_id, group) for trace_id, group in by_trace.items()]
    _mark_slow(out, peers)
    return sorted(out, key=lambda t: (t.start_ms, t.trace_id))


def _inner(trees: Iterable[Trajectory]) -> list[tuple[Trajectory, SpanNode]]:
    """The spans that may be slow: a span whose time is its children's (a rollout around its calls) is not."""
    return [
        (t, node)
        for t in trees
        for depth, node in t.nodes()
        if depth > 0 and (not node.children or node.span.kind in ("LLM", "TOOL"))
    ]


def peer_durations(trees: Iterable[Trajectory]) -> dict[str, list[float]]:
    """The durations of the spans that may be slow, by name: what a span of the step is compared with."""
    by_name: dict[str, list[float]] = {}
    for _, node in _inner(trees):
        by_name.setdefault(node.span.name, []).append(node.span.duration_ms)
    return by_name


def _mark_slow(trees: list[Trajectory], peers: Mapping[str, list[float]] | None) -> None:
    """Mark the slow spans: slow beside their peers of the same name in the step, else within their trajectory."""
    by_name = peer_durations(trees) if peers is None else peers
    for t, node in _inner(trees):
        took, same = node.span.duration_ms, by_name.get(node.span.name) or [node.span.duration_ms]
        if took < SLOW_FLOOR_MS:
            continue
        if len(same) >= 3:
            node.slow = took >= SLOW_FACTOR * statistics.median(same)
        else:
            node.slow = took / max(t.duration_ms, 1e-9) >= SLOW_SHARE


def trajectory(trace_id: str, spans: list[Span]) -> Trajectory:
    """One trace's spans as its tree."""
    spans = sorted(spans, key=lambda s: (s.start_ms, s.span_id))
    nodes = {s.span_id: SpanNode(span=s) for s in spans}
    roots: list[SpanNode] = []
    for s in spans:
        parent = nodes.get(s.parent_id or "")
        if parent is None or parent is nodes[s.span_id]:
            roots.append(nodes[s.span_id])
        else:
            parent.children.append(nodes[s.span_id])
    start = min(s.start_ms for s in spans)
    end = max(s.start_ms + s.duration_ms for s in spans)
    sample = next((ref for s in spans if (ref := s.sample()) is not None), None)
    return Trajectory(
        trace_id=trace_id,
        sample=sample,
        start_ms=start,
        duration_ms=end - start,
        spans=len(spans),
        errors=sum(s.failed for s in spans),
        roots=roots,
    )
