"""What `opd probe` measured: every answer, each side's figures and the verdicts, as one typed result.

The figures are computed here from the answers (one rule each), so the terminal, ``--json``, the MCP
tool and the notebook view read the same numbers; the verdicts over them are :mod:`.probe_verdicts`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from opd_nb.results import ResultMixin
from opd_nb.views import render

Side = Literal["teacher", "student"]
SIDES: tuple[Side, Side] = ("teacher", "student")
SCORE_DIGITS = 6  # scores equal to this many digits count as the same score


class ProbeAnswer(BaseModel):
    """One sampled answer (a rollout's last assistant turn, on an agentic workspace) and its reward."""

    side: Side
    prompt: int  # index among the probed prompts
    sample: int  # 0..K-1
    answer: str = ""
    score: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    error: str | None = None  # the chat call's or the reward function's error, in words
    reward_failed: bool = False  # the error is the reward function's (not the model call's)
    truncated: bool = False  # the answer hit the length limit
    tokens: int | None = None  # the answer's tokens (usage.completion_tokens, summed over a rollout's calls)
    calls: int = 0  # chat calls it took


class SideFigures(BaseModel):
    """One side's figures over its answers."""

    model: str
    answers: int
    scored: int
    mean: float | None
    spread: float | None  # the scores' standard deviation
    truncated_share: float | None
    answer_tokens_mean: float | None
    zero_variance_groups: int  # prompts whose K answers all scored the same
    groups: int
    failed: int  # answers the reward function failed on (or timed out)
    metrics: dict[str, float] = Field(default_factory=dict)  # the reward's own metrics, means


class Verdict(BaseModel):
    """One rule's finding: its code (stable, for scripts), what it means and the evidence."""

    code: str
    severity: Literal["ok", "info", "warning", "error"]
    message: str
    evidence: list[str] = Field(default_factory=list)


class ProbeCost(BaseModel):
    """What the probe sends: its calls and their tokens at most, and money where a price is known."""

    chat_calls: int  # N x K x 2 (an agentic rollout may make more: its function decides)
    tokens_max: int  # every call at the job's max_length
    price_per_million_tokens: float | None = None
    money_max: float | None = None
    agentic: bool = False

    def line(self) -> str:
        calls = f"{'at least ' if self.agentic else ''}{self.chat_calls} chat calls"
        money = (
            f", at most {self.money_max:,.4f} at {self.price_per_million_tokens:g} per million tokens"
            if self.money_max is not None
            else " (pass --price, money per million tokens, to see the money)"
        )
        return f"{calls}, at most {self.tokens_max:,} tokens{money}"


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _spread(values: Sequence[float]) -> float | None:
    mean = _mean(values)
    if mean is None:
        return None
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def side_figures(model: str, answers: Sequence[ProbeAnswer]) -> SideFigures:
    """The figures of one side's answers."""
    scores = [a.score for a in answers if a.score is not None]
    groups: dict[int, list[float]] = {}
    for a in answers:
        if a.score is not None:
            groups.setdefault(a.prompt, []).append(a.score)
    flat = sum(len({round(s, SCORE_DIGITS) for s in g}) == 1 for g in groups.values() if len(g) > 1)
    tokens = [float(a.tokens) for a in answers if a.tokens is not None]
    keys = sorted({k for a in answers for k in a.metrics})
    metrics = {
        k: m for k in keys if (m := _mean([a.metrics[k] for a in answers if k in a.metrics])) is not None
    }
    sent = [a for a in answers if a.calls]
    return SideFigures(
        model=model,
        answers=len(answers),
        scored=len(scores),
        mean=_mean(scores),
        spread=_spread(scores),
        truncated_share=_mean([float(a.truncated) for a in sent]),
        answer_tokens_mean=_mean(tokens),
        zero_variance_groups=flat,
        groups=sum(len(g) > 1 for g in groups.values()),
        failed=sum(a.reward_failed for a in answers),
        metrics=metrics,
    )


def prompt_means(answers: Sequence[ProbeAnswer], side: Side) -> dict[int, float]:
    """Each prompt's mean score on one side (prompts with no score left out)."""
    by: dict[int, list[float]] = {}
    for a in answers:
        if a.side == side and a.score is not None:
            by.setdefault(a.prompt, []).append(a.score)
    return {p: sum(v) / len(v) for p, v in by.items()}


def teacher_beats_share(answers: Sequence[ProbeAnswer]) -> float | None:
    """The share of prompts (scored on both sides) where the teacher's mean beats the student's."""
    teacher, student = prompt_means(answers, "teacher"), prompt_means(answers, "student")
    both = sorted(set(teacher) & set(student))
    if not both:
        return None
    return sum(round(teacher[p] - student[p], SCORE_DIGITS) > 0 for p in both) / len(both)


class ProbeResult(ResultMixin, BaseModel):
    """`opd probe WS`: the teacher's ceiling and the student's floor on the workspace's own reward."""

    workspace: str
    target: str
    config_hash: str
    config: str = "config.yaml"  # the job YAML probed (`-c/--config`)
    mode: Literal["native", "agentic"]
    scorer: str  # "reward <classpath>" | "exact_match"
    data: str  # the file the prompts came from
    prompts: int
    samples: int  # K per prompt and side
    seed: int
    max_tokens: int | None  # each answer's room (max_length - max_prompt_length)
    temperature: float
    teacher: SideFigures
    student: SideFigures
    teacher_beats_share: float | None
    verdicts: list[Verdict]
    cost: ProbeCost
    calls_sent: int = 0
    tokens_used: int = 0
    budget: str | None = None
    stopped_by_budget: bool = False
    job_estimate: str | None = None  # `opd estimate`'s line for the job this would start
    answers: list[ProbeAnswer] = Field(default_factory=list)
    seconds: float = 0.0

    def title(self) -> str:
        """What was probed: the workspace, and its job YAML when it is not config.yaml."""
        return self.workspace if self.config == "config.yaml" else f"{self.workspace} ({self.config})"

    def side(self, side: Side) -> SideFigures:
        return self.teacher if side == "teacher" else self.student

    def verdict_codes(self) -> list[str]:
        return [v.code for v in self.verdicts]

    def worst_teacher_answers(self, n: int = 5) -> list[ProbeAnswer]:
        """The lowest-scoring teacher answers (failed ones first), with what the reward said."""
        teacher = [a for a in self.answers if a.side == "teacher" and a.calls]
        return sorted(teacher, key=lambda a: (a.score is not None, a.score or 0.0, a.prompt, a.sample))[:n]

    def summary(self) -> str:
        from opd_nb.experiments import probe_text

        t, s = self.teacher, self.student
        return (
            f"teacher {t.model}: mean {render.fmt(t.mean)}; student {s.model}: mean {render.fmt(s.mean)}; "
            f"{probe_text.beats_text(self.teacher_beats_share)}; {', '.join(self.verdict_codes())}"
        )

    def __str__(self) -> str:
        from opd_nb.experiments.probe_text import probe_text

        return probe_text(self)

    def _repr_html_(self) -> str:
        from opd_nb.experiments.probe_text import probe_html

        return probe_html(self)
