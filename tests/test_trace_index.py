"""A trace page read through its step's index answers what reading the whole step answered.

The page is built from the calls it shows (their lines only), the step's slow-span peers and its trace
numbers (both from the index): for every kind, limit and sample filter, as the step grows, with a torn
line, and once retention removed the file, it equals the page made from every span of the step.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from test_traces_route import _app

from opd_nb.server.tracing.intake import TraceIntake, _matches
from opd_nb.traces import ids
from opd_nb.traces.page import TracesPage
from opd_nb.traces.spans import Span, trajectories
from opd_nb.traces.summary import StepTraces

STEP = 3


def _calls(kind: str, first: int, n: int, *, slow_every: int = 4) -> list[Span]:
    """`n` traced calls (CHAIN > ROLLOUT > LLM, TOOL) of the step; every `slow_every`-th LLM call is slow."""
    out: list[Span] = []
    for call in range(first, first + n):
        where = ids.where(kind, STEP)
        attrs = {
            ids.SAMPLE_ID_KEY: ids.sample_id(where, call // 2),
            ids.ROLLOUT_ID_KEY: str(call % 2),
            ids.ATTEMPT_ID_KEY: "0",
        }
        trace = f"{kind[0]}{call:031x}"
        llm_ms = 900.0 if call % slow_every == 0 else 150.0 + call
        shape = [  # (name, kind, parent part, start offset, duration, status)
            ("invoke_agentic_rl", "CHAIN", None, 0.0, 2000.0, "ok"),
            ("invoke_rollout R", "ROLLOUT", 0, 1.0, 1900.0, "ok"),
            ("chat student", "LLM", 1, 2.0, llm_ms, "ok"),
            ("execute_tool count_digits", "TOOL", 1, 3.0 + llm_ms, 120.0, "error" if call % 3 == 0 else "ok"),
        ]
        for part, (name, span_kind, parent, offset, took, status) in enumerate(shape):
            out.append(
                Span(
                    trace_id=trace,
                    span_id=f"{call * 4 + part + 1:016x}",
                    parent_id=None if parent is None else f"{call * 4 + parent + 1:016x}",
                    name=name,
                    kind=span_kind,
                    start_ms=1.7e12 + (call % 7) * 10.0 + offset,  # ties in start: ordered by trace id
                    duration_ms=took,
                    status=status,  # type: ignore[arg-type]
                    attributes={**attrs, "gen_ai.tool.name": "count_digits", "big": "x" * 200},
                    service="opd ft-1 rollout r",
                )
            )
    return out


def _whole_step_page(
    intake: TraceIntake, kind: str | None, group: int | None, sample: int | None, limit: int
) -> TracesPage:
    """The page as it was made before the index: every span of the step read and built into trees."""
    spans = [s for k in ((kind,) if kind else ids.KINDS) for s in intake.files.read("ft-1", k, STEP)]
    trajs = [t for t in trajectories(spans) if _matches(t.sample, group, sample)]
    acc = StepTraces()
    acc.add(s for s in spans if (r := s.sample()) is not None and r.kind == "train")
    return TracesPage(
        job_id="ft-1",
        step=STEP,
        kind=kind,
        steps_by_kind=intake.files.steps("ft-1"),
        trajectories=trajs[:limit],
        total=len(trajs),
        metrics=acc.metrics(),
    )


def _same_pages(intake: TraceIntake) -> int:
    checked = 0
    for kind, (group, sample), limit in itertools.product(
        (None, "train", "validation"), ((None, None), (1, None), (2, 1), (None, 0), (99, 0)), (1, 3, 1000)
    ):
        got = intake.page("ft-1", STEP, kind, (group, sample), limit)
        want = _whole_step_page(intake, kind, group, sample, limit)
        assert got.model_dump() == want.model_dump(), (kind, group, sample, limit)
        checked += len(got.trajectories)
    return checked


def test_a_page_through_the_index_equals_the_page_of_the_whole_step(tmp_path: Path) -> None:
    client, _ = _app(tmp_path)
    intake: TraceIntake = client.app.state.services.traces
    files = intake.files
    train = _calls("train", 0, 12)
    files.add("ft-1", "train", STEP, train[:30])  # a call's spans split over two batches
    files.add("ft-1", "validation", STEP, _calls("validation", 0, 5))
    assert _same_pages(intake) > 0
    files.add("ft-1", "train", STEP, train[30:])  # the step grows: the index follows
    files.add("ft-1", "train", STEP, _calls("train", 12, 9, slow_every=2))
    assert _same_pages(intake) > 0
    page = intake.page("ft-1", STEP, "train", (None, None), 1000)
    assert len(page.trajectories) == 21 and any(n.slow for t in page.trajectories for _, n in t.nodes())
    assert any(not n.slow and n.span.kind == "LLM" for t in page.trajectories for _, n in t.nodes())
    path = files.dir("ft-1") / f"train-{STEP:06d}.jsonl"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(train[0].model_dump_json()[:50])  # a line a killed server left half-written
    assert _same_pages(intake) > 0
    path.unlink()  # retention removed the step's train file
    assert intake.page("ft-1", STEP, "train", (None, None), 10).trajectories == []
    assert _same_pages(intake) > 0  # its validation spans still read
