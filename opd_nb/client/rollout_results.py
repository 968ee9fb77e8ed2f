"""What the student wrote: a step's recorded rollouts as the client returns them, and what to show of them.

A local control plane serves the engine's records (``GET /fine-tunes/{id}/rollouts``, format in
``opd_nb.engine.rollouts``); the client reads them as plain JSON, never through the engine. This
module holds the one reading of a record that every front end shares: its prompt, its mean
teacher−student log-ratio, the best and worst sample of a step, and the shading of each token by how
much the teacher disagrees (HTML for the notebook, rich for a terminal), so the viewer, the monitor's
samples panel and ``opd rollouts`` can never disagree about what a sample says.

The log-ratio of a token is ``teacher_logprob − student_logprob``: below 0 the teacher finds the
student's token less likely than the student did (it disagrees), above 0 it likes it more.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from opd_nb.results import ResultMixin
from opd_nb.wire.base import json_object, json_objects
from opd_nb.wire.rollouts import RolloutsPage

KINDS = ("train", "validation")
CLOUD_NOTE = (
    "This control plane has no rollouts endpoint (Bailian): the Bailian console shows the "
    "trajectories of each job."
)
EOS_MARK = "∎"  # how the end-of-sequence token (empty text) is shown
FULL_SHADE = 3.0  # |log-ratio| in nats at which a token is fully shaded
LEGEND = (
    "token shading: red = the teacher disagrees (log p_teacher − log p_student < 0), "
    f"green = the teacher likes it more; grey underline = no teacher score; {EOS_MARK} = end of answer"
)


# ---- figures of one record --------------------------------------------------------------------------
def log_ratio(token: Mapping[str, Any]) -> float | None:
    """teacher − student log-prob of one token (None where either is missing)."""
    t, s = token.get("teacher_logprob"), token.get("student_logprob")
    if not isinstance(t, int | float) or not isinstance(s, int | float):
        return None
    return float(t) - float(s)


def mean_log_ratio(record: Mapping[str, Any]) -> float | None:
    """The mean log-ratio over the record's teacher-scored tokens (None when none was scored)."""
    ratios = [r for t in record.get("tokens") or () if (r := log_ratio(t)) is not None]
    return sum(ratios) / len(ratios) if ratios else None


def message_text(message: Mapping[str, Any] | None) -> str:
    """A chat message's text, whether its content is a string or a list of parts."""
    content = (message or {}).get("content")
    parts = json_objects(content)  # a list of parts: the text of each object part
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in parts)
    return "" if content is None else str(content)


def tool_calls_text(message: Mapping[str, Any] | None) -> str:
    """An assistant message's tool calls as ``name(arguments)``, comma-separated (empty: none), so that a
    turn whose only output is a call still shows what it did."""
    out: list[str] = []
    for call in json_objects((message or {}).get("tool_calls")):
        fn = json_object(call.get("function")) or call
        args = fn.get("arguments", "")
        out.append(f"{fn.get('name', '?')}({args if isinstance(args, str) else json.dumps(args)})")
    return ", ".join(out)


def prompt_text(record: Mapping[str, Any]) -> str:
    """The user turn the sample answers: the last user message before the first assistant turn."""
    user = ""
    for m in json_objects(record.get("messages")):
        if m.get("role") == "assistant":
            break
        if m.get("role") == "user":
            user = message_text(m)
    return user


def reward_of(record: Mapping[str, Any]) -> float | None:
    value = record.get("reward_score")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """The columns of the samples table: prompt, completion, reward, length, truncated, mean log-ratio."""
    return {
        "kind": record.get("kind"),
        "step": record.get("step"),
        "group": record.get("group"),
        "sample": record.get("sample"),
        "prompt": prompt_text(record),
        "completion": str(record.get("completion") or ""),
        "reward": reward_of(record),
        "length": len(record.get("tokens") or ()),
        "truncated": bool(record.get("truncated")),
        "mean_log_ratio": mean_log_ratio(record),
        "reward_status": record.get("reward_status"),
        "reward_error": record.get("reward_error") or record.get("rollout_error"),
    }


def _rank_key(record: Mapping[str, Any]) -> tuple[float, float]:
    """Best first: higher reward, then the teacher agreeing more (unknowns last)."""
    reward, ratio = reward_of(record), mean_log_ratio(record)
    return (-math.inf if reward is None else reward, -math.inf if ratio is None else ratio)


def best_and_worst(records: Sequence[Mapping[str, Any]]) -> tuple[int, int] | None:
    """Indices of the best and the worst sample (by reward, then by mean log-ratio); None when empty."""
    if not records:
        return None
    order = sorted(range(len(records)), key=lambda i: _rank_key(records[i]))
    return order[-1], order[0]


SORTS = {
    "order": "as recorded",
    "reward_desc": "reward, highest first",
    "reward_asc": "reward, lowest first",
    "ratio_asc": "mean log-ratio, most disagreement first",
    "ratio_desc": "mean log-ratio, most agreement first",
}


def sort_order(records: Sequence[Mapping[str, Any]], by: str) -> list[int]:
    """Record indices sorted by `by` (a key of :data:`SORTS`); unknown values sort last either way."""
    if by not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {by!r}")
    idx = list(range(len(records)))
    if by == "order":
        return idx
    get = reward_of if by.startswith("reward") else mean_log_ratio
    desc = by.endswith("desc")
    known = [i for i in idx if get(records[i]) is not None]
    unknown = [i for i in idx if get(records[i]) is None]
    known.sort(key=lambda i: get(records[i]), reverse=desc)  # pyright: ignore[reportArgumentType, reportCallIssue]
    return known + unknown


# ---- shading ------------------------------------------------------------------------------------------
def _shade(ratio: float) -> tuple[tuple[int, int, int], float]:
    """(rgb, strength 0..1) of a token's shading."""
    strength = min(1.0, abs(ratio) / FULL_SHADE)
    return ((207, 34, 46) if ratio < 0 else (26, 127, 55)), strength


def _visible(token: Mapping[str, Any], *, last: bool) -> str:
    """A token's text; the end-of-sequence token (text "", last) shows as a marker so its score is visible."""
    text = str(token.get("text") or "")
    return EOS_MARK if not text and last else text


def token_tooltip(token: Mapping[str, Any]) -> str:
    """Both log-probs (and probabilities) of a token, and their difference."""

    def part(name: str, lp: Any) -> str:
        if not isinstance(lp, int | float):
            return f"{name}: no score"
        return f"{name} log p {lp:.3f} (p={math.exp(lp):.3f})"

    ratio = log_ratio(token)
    parts = [part("student", token.get("student_logprob")), part("teacher", token.get("teacher_logprob"))]
    if ratio is not None:
        parts.append(f"teacher−student {ratio:+.3f}")
    if token.get("trained") is False:
        parts.append("not trained (cut to fit max_length)")
    return " · ".join(parts)


def tokens_html(tokens: Sequence[Mapping[str, Any]]) -> str:
    """The completion as spans, each shaded by its log-ratio, with a tooltip giving both log-probs.

    Inline styles and ``title`` only (no script), so it survives a saved notebook's sanitizer. A token
    the teacher agrees with (no shade) carries no style: most tokens of a trained student, and a saved
    notebook's viewer is that much smaller.
    """
    spans: list[str] = []
    for i, tok in enumerate(tokens):
        text = _visible(tok, last=i == len(tokens) - 1)
        if not text:
            continue
        ratio = log_ratio(tok)
        style = ' style="border-bottom:1px dotted #888"' if ratio is None else ""
        if ratio is not None:
            (r, g, b), strength = _shade(ratio)
            alpha = round(0.75 * strength if ratio < 0 else 0.4 * strength, 3)
            style = f' style="background-color:rgba({r},{g},{b},{alpha})"' if alpha > 0 else ""
        spans.append(
            f'<span class="opd-tok"{style} title="{html.escape(token_tooltip(tok))}">'
            f"{html.escape(text)}</span>"
        )
    return (
        '<div class="opd-completion" style="font-family:monospace;white-space:pre-wrap;'
        'word-break:break-all;line-height:1.6">' + "".join(spans) + "</div>"
    )


def tokens_rich(tokens: Sequence[Mapping[str, Any]]) -> Any:
    """The completion as a rich ``Text``, each token's background shaded by its log-ratio.

    The text is appended as plain strings, never parsed as markup, so ``[bold]`` in a completion
    prints as it is.
    """
    from rich.color import Color
    from rich.style import Style
    from rich.text import Text

    out = Text()
    for i, tok in enumerate(tokens):
        text = _visible(tok, last=i == len(tokens) - 1)
        if not text:
            continue
        ratio = log_ratio(tok)
        if ratio is None:
            out.append(text, style=Style(underline=True, dim=True))
            continue
        (r, g, b), strength = _shade(ratio)
        if ratio > 0:
            strength *= 0.5
        mix = [round(255 - (255 - c) * strength) for c in (r, g, b)]
        fg = "white" if ratio < 0 and strength > 0.6 else "black"
        out.append(text, style=Style(color=fg, bgcolor=Color.from_rgb(*mix)))
    return out


def _num(value: Any, spec: str = ".3g") -> str:
    return "" if value is None else format(value, spec)


# ---- the typed result -----------------------------------------------------------------------------------
class RolloutPage(ResultMixin, BaseModel):
    """One step's recorded rollouts of a job, and which steps have any (by kind)."""

    job_id: str
    step: int | None = None  # the step shown (None: nothing recorded yet)
    kind: str | None = None  # the kind asked for (None: both)
    steps: list[int] = Field(default_factory=list[int])  # recorded steps of `kind`, ascending
    steps_by_kind: dict[str, list[int]] = Field(default_factory=dict[str, list[int]])
    rollouts: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])

    @classmethod
    def from_output(cls, job_id: str, out: Any) -> RolloutPage:
        """Read through the wire's page (:class:`~opd_nb.wire.rollouts.RolloutsPage`); each record stays
        the engine's JSON object, as every view here reads it."""
        out = json_object(out)
        page = RolloutsPage.model_validate(
            {"job_id": job_id, **{k: v for k, v in out.items() if v is not None}}
        )
        return cls(
            job_id=page.job_id,
            step=page.step,
            kind=page.kind,
            steps=page.steps,
            steps_by_kind=page.steps_by_kind,
            rollouts=[r.wire() for r in page.rollouts],
        )

    def to_payload(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "step": self.step,
            "kind": self.kind,
            "steps": self.steps,
            "rollouts": self.rollouts,
        }

    def sorted(self, by: str) -> RolloutPage:
        """The same page with its samples in the order of `by` (a key of :data:`SORTS`)."""
        if by == "order":
            return self
        return self.model_copy(update={"rollouts": [self.rollouts[i] for i in sort_order(self.rollouts, by)]})

    def summaries(self) -> list[dict[str, Any]]:
        return [summary(r) for r in self.rollouts]

    def truncated_share(self) -> float | None:
        flags = [bool(r.get("truncated")) for r in self.rollouts]
        return sum(flags) / len(flags) if flags else None

    def title(self) -> str:
        if self.step is None:
            return f"{self.job_id}: no rollouts recorded yet"
        kind = self.kind or "train + validation"
        return (
            f"{self.job_id} step {self.step} ({kind}): {len(self.rollouts)} sample(s); "
            f"recorded steps {_span(self.steps)}"
        )

    def trace_line(self, group: Any, sample: Any) -> str:
        """The command that shows one sample's spans (a local control plane keeps the SDK's traces)."""
        return f"opd traces {self.job_id} --step {self.step} --group {group} --sample {sample}"

    def __str__(self) -> str:
        lines = [self.title()]
        for i, s in enumerate(self.summaries()):
            lines.append(
                f"#{i} {s['kind']} group {s['group']} sample {s['sample']}: reward {_num(s['reward'])} "
                f"length {s['length']}{' truncated' if s['truncated'] else ''} "
                f"mean log-ratio {_num(s['mean_log_ratio'], '+.3f')}"
            )
            lines.append(f"  prompt: {s['prompt']!r}")
            lines.append(f"  completion: {s['completion']!r}")
            lines.append(f"  trajectory: {self.trace_line(s['group'], s['sample'])}")
        return "\n".join(lines)

    def __rich__(self) -> Any:
        """Each completion with its tokens shaded (user text appended as ``Text``, never markup)."""
        from rich.console import Group
        from rich.text import Text

        parts: list[Any] = [Text(self.title(), style="bold"), Text(LEGEND, style="dim")]
        if self.step is not None:
            parts.append(
                Text(f"a sample's trajectory (its traced calls): {self.trace_line('G', 'S')}", style="dim")
            )
        if self.step is None:
            parts.append(Text("the engine records rollouts from the first step; try again in a moment"))
        for i, s in enumerate(self.summaries()):
            rec = self.rollouts[i]
            head = Text(f"\n#{i} {s['kind']} · group {s['group']} · sample {s['sample']}", style="bold")
            head.append(
                f" · reward {_num(s['reward'])} · {s['length']} tokens"
                f"{' · TRUNCATED' if s['truncated'] else ''}"
                f" · mean log-ratio {_num(s['mean_log_ratio'], '+.3f')}"
            )
            parts += [head, Text("prompt: ", style="dim") + Text(s["prompt"])]
            if s["reward_error"]:
                parts.append(Text("reward error: ", style="red") + Text(str(s["reward_error"])))
            parts.append(tokens_rich(rec.get("tokens") or ()))
        return Group(*parts)

    def _repr_html_(self) -> str:
        from opd_nb.views import render

        rows = [
            (
                i,
                s["prompt"],
                s["completion"][:80],
                _num(s["reward"]),
                s["length"],
                "yes" if s["truncated"] else "",
                _num(s["mean_log_ratio"], "+.3f"),
            )
            for i, s in enumerate(self.summaries())
        ]
        table = render.table(
            ["#", "prompt", "completion", "reward", "length", "truncated", "mean log-ratio"], rows
        )
        return render.box(table, title=self.title())


def _span(steps: Sequence[int]) -> str:
    if not steps:
        return "none"
    if len(steps) <= 6:
        return ", ".join(str(s) for s in steps)
    return f"{steps[0]}, {steps[1]}, …, {steps[-1]} ({len(steps)})"
