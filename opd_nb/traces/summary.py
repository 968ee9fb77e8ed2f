"""What a step's spans say in numbers: tool latency (p50/p95) and error rate per tool, LLM calls per
trajectory. The control plane folds them into the step's metrics (names in :mod:`opd_nb.constants`),
so the monitor's chart and its health rules see them like any other metric.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from pydantic import BaseModel, Field

from opd_nb.constants import LLM_CALLS_PER_TRAJECTORY, TOOL_ERROR_RATE, TOOL_LATENCY_P95, TOOL_METRIC_PREFIX
from opd_nb.traces.spans import Span

MAX_TOOLS = 20  # tools with metrics of their own per step (the rest still count in the totals)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, linearly interpolated (as numpy's default)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def metric_name(tool: str) -> str:
    """A tool's name as a metric key segment (user text: only letters, digits, ``_.-``; 64 at most)."""
    return _UNSAFE.sub("_", tool).strip("_")[:64] or "tool"


class ToolStats(BaseModel):
    calls: int = 0
    errors: int = 0
    seconds: list[float] = Field(default_factory=list)


class StepTraces(BaseModel):
    """A step's spans, accumulated batch by batch as they arrive."""

    tools: dict[str, ToolStats] = Field(default_factory=dict)
    llm_calls: dict[str, int] = Field(default_factory=dict)  # trace id -> LLM spans in it
    traces: set[str] = Field(default_factory=set)  # trace ids with a rollout (or reward) span

    def add(self, spans: Iterable[Span]) -> None:
        for s in spans:
            if s.kind == "TOOL":
                name = str(s.attributes.get("gen_ai.tool.name") or s.name.partition(" ")[2] or "tool")
                stats = self.tools.setdefault(name, ToolStats())
                stats.calls += 1
                stats.errors += s.failed
                stats.seconds.append(s.duration_ms / 1000.0)
            elif s.kind == "LLM":
                self.llm_calls[s.trace_id] = self.llm_calls.get(s.trace_id, 0) + 1
            elif s.kind == "ROLLOUT":
                self.traces.add(s.trace_id)

    def merge(self, other: StepTraces) -> None:
        """Add another part of the step's spans (``other`` is left as it was)."""
        for name, theirs in other.tools.items():
            mine = self.tools.setdefault(name, ToolStats())
            mine.calls += theirs.calls
            mine.errors += theirs.errors
            mine.seconds.extend(theirs.seconds)
        for trace_id, calls in other.llm_calls.items():
            self.llm_calls[trace_id] = self.llm_calls.get(trace_id, 0) + calls
        self.traces |= other.traces

    def metrics(self) -> dict[str, float]:
        """The step's trace metrics (only those the spans can tell)."""
        out: dict[str, float] = {}
        every = [x for t in self.tools.values() for x in t.seconds]
        if every:
            out[TOOL_LATENCY_P95] = percentile(every, 0.95)
            out[TOOL_ERROR_RATE] = sum(t.errors for t in self.tools.values()) / len(every)
        busiest = sorted(self.tools.items(), key=lambda kv: (-kv[1].calls, kv[0]))[:MAX_TOOLS]
        for name, t in busiest:
            key = TOOL_METRIC_PREFIX + metric_name(name)
            out[f"{key}/latency_p50_s"] = percentile(t.seconds, 0.5)
            out[f"{key}/latency_p95_s"] = percentile(t.seconds, 0.95)
            out[f"{key}/error_rate"] = t.errors / t.calls
        if self.traces:
            out[LLM_CALLS_PER_TRAJECTORY] = sum(self.llm_calls.get(t, 0) for t in self.traces) / len(
                self.traces
            )
        return out
