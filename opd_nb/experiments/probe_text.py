"""How a probe's result reads: a terminal text, and static HTML for the notebook (the two score
distributions side by side as SVG, the verdicts, the worst teacher answers), which a saved notebook
keeps as it is: no script, no kernel, nothing loaded from the network.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from opd_nb.views import render, theme

if TYPE_CHECKING:
    from opd_nb.experiments.probe_result import ProbeResult, SideFigures


def beats_text(share: float | None) -> str:
    """The one wording of the teacher-beats share: "teacher beats student on 75% of prompts"."""
    if share is None:
        return "teacher beats student on no prompt scored on both sides"
    return f"teacher beats student on {100 * share:.0f}% of prompts"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


BINS = 10  # score histogram bins over the scores' range
BAR_W, BAR_H = 18, 80
MARK = {"ok": "✓", "info": "·", "warning": "!", "error": "✗"}


def _side_line(name: str, f: SideFigures) -> str:
    metrics = ", ".join(f"{k}={render.fmt(v)}" for k, v in f.metrics.items())
    return (
        f"  {name} {f.model}: mean {render.fmt(f.mean)}, spread {render.fmt(f.spread)}, "
        f"{f.scored}/{f.answers} scored, truncated {render.fmt(f.truncated_share)}, "
        f"answer tokens {render.fmt(f.answer_tokens_mean)}, reward failed on {f.failed}"
        + (f"; reward metrics: {metrics}" if metrics else "")
    )


def probe_text(r: ProbeResult) -> str:
    lines = [
        f"probe of {r.title()} on {r.target} ({r.mode}, {r.scorer})",
        f"  {plural(r.prompts, 'prompt')} from {r.data} x {plural(r.samples, 'sample')} per model (seed {r.seed}, "
        f"answer room {r.max_tokens} tokens, temperature {r.temperature:g})",
        _side_line("teacher", r.teacher),
        _side_line("student", r.student),
        f"  {beats_text(r.teacher_beats_share)}",
        f"  sent {r.calls_sent} chat calls, about {r.tokens_used:,} tokens (estimated: {r.cost.line()})",
    ]
    if r.stopped_by_budget:
        lines.append(f"  the budget ({r.budget}) stopped it: answers past it were not sent")
    for v in r.verdicts:
        lines.append(f"{MARK[v.severity]} {v.code}: {v.message}")
        lines.extend(f"    {e}" for e in v.evidence)
    return "\n".join(lines)


# the two sides' bars and legend in the host theme's colours (light and dark twins)
SIDES_CSS = theme.palette_css(".opd-probe-hist", theme.SIDES, {s: f"side-{s}" for s in theme.SIDES}, "fill")


def _histogram(r: ProbeResult) -> str:
    """Both sides' score counts in the same bins, side by side (an inline SVG)."""
    scores = [a.score for a in r.answers if a.score is not None]
    if not scores:
        return "<p>no scored answers</p>"
    lo, hi = min(scores), max(scores)
    width = (hi - lo) / BINS or 1.0

    def bin_of(s: float) -> int:
        return min(BINS - 1, int((s - lo) / width)) if hi > lo else 0

    counts = {
        side: Counter(bin_of(a.score) for a in r.answers if a.side == side and a.score is not None)
        for side in ("teacher", "student")
    }
    top = max(max(c.values(), default=0) for c in counts.values()) or 1
    parts = []
    n_bins = BINS if hi > lo else 1
    for b in range(n_bins):
        for j, side in enumerate(("teacher", "student")):
            h = BAR_H * counts[side][b] / top
            x = 30 + b * (2 * BAR_W + 6) + j * BAR_W
            parts.append(
                f'<rect x="{x}" y="{10 + BAR_H - h:.1f}" width="{BAR_W - 2}" height="{h:.1f}" '
                f'class="side-{side}"><title>{side}: {counts[side][b]}</title></rect>'
            )
    w = 40 + n_bins * (2 * BAR_W + 6)
    labels = (
        f'<text x="30" y="{BAR_H + 24}" font-size="10" fill="currentColor">{render.esc(render.fmt(lo))}</text>'
        f'<text x="{w - 30}" y="{BAR_H + 24}" font-size="10" fill="currentColor">'
        f"{render.esc(render.fmt(hi))}</text>"
    )
    legend = "".join(
        f'<text x="{30 + i * 90}" y="{BAR_H + 38}" font-size="10" class="side-{s}">{s}</text>'
        for i, s in enumerate(("teacher", "student"))
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="opd-probe-hist" width="{w}" height="{BAR_H + 44}" '
        f'role="img"><style>{SIDES_CSS}</style>'
        f"<title>scores of the teacher's and the student's answers</title>{''.join(parts)}{labels}{legend}</svg>"
    )


def probe_html(r: ProbeResult) -> str:
    """The probe as static HTML (the notebook's view and its saved snapshot)."""
    head = []
    for name, f in (("teacher", r.teacher), ("student", r.student)):
        metrics = ", ".join(f"{k}={render.fmt(v)}" for k, v in f.metrics.items())
        head.append(
            (name, f.model, f.mean, f.spread, f.truncated_share, f.answer_tokens_mean, f.failed, metrics)
        )
    figures = render.table(
        ["side", "model", "mean", "spread", "truncated", "answer tokens", "reward failed", "reward metrics"],
        head,
    )
    verdicts = "".join(
        f'<li><b class="{render.SEVERITY_CLASS.get(v.severity, "")}">{render.esc(v.code)}</b>: '
        f"{render.esc(v.message)}"
        + ("<ul>" + "".join(f"<li>{render.esc(e)}</li>" for e in v.evidence) + "</ul>" if v.evidence else "")
        + "</li>"
        for v in r.verdicts
    )
    worst = render.table(
        ["prompt", "sample", "score", "reward's reason", "answer"],
        [
            (
                a.prompt,
                a.sample,
                a.score,
                a.error or ", ".join(f"{k}={render.fmt(v)}" for k, v in a.metrics.items()),
                a.answer,
            )
            for a in r.worst_teacher_answers()
        ],
    )
    note = (
        f"<small>{plural(r.prompts, 'prompt')} x {plural(r.samples, 'sample')} per model; "
        f"{beats_text(r.teacher_beats_share)}; {plural(r.calls_sent, 'chat call')} sent; "
        f"scored with {render.esc(r.scorer)}</small>"
    )
    body = (
        figures + note + _histogram(r) + f"<ul>{verdicts}</ul><b>lowest-scoring teacher answers</b>" + worst
    )
    return render.box(body, title=f"probe of {r.title()}")
