"""The probe's verdicts: one rule per reason a job would (not) learn, each over the probe's figures.

Each rule is a function of :class:`ProbeFacts` that returns a :class:`Verdict` or None, so each is
tested alone; :func:`verdicts` runs them in order. The thresholds are named here, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opd_nb.experiments.probe_result import (
    SCORE_DIGITS,
    ProbeAnswer,
    SideFigures,
    Verdict,
)
from opd_nb.experiments.probe_text import beats_text
from opd_nb.views import render

CLEAR_MARGIN = 0.1  # the teacher's mean must beat the student's by this much (rewards in [0, 1])
NEAR_ZERO = 0.05  # a teacher mean at or under this: the reward gives the teacher's answers no credit
TRUNCATED_SHARE = 0.2  # a side with this share of answers cut at the length limit
SHOWN = 5  # answers or failures listed as evidence


@dataclass(frozen=True)
class ProbeFacts:
    """What the rules read: both sides' figures, every answer, and the job's own estimate line."""

    teacher: SideFigures
    student: SideFigures
    teacher_beats_share: float | None
    answers: list[ProbeAnswer]
    scorer: str
    job_estimate: str | None = None
    max_tokens: int | None = None

    def scores(self) -> list[float]:
        return [a.score for a in self.answers if a.score is not None]

    def constant(self) -> bool:
        """Every scored answer, both sides, got the same score."""
        scores = self.scores()
        return len(scores) > 1 and len({round(s, SCORE_DIGITS) for s in scores}) == 1

    def teacher_near_zero(self) -> bool:
        return self.teacher.mean is not None and self.teacher.mean <= NEAR_ZERO


def _answer_line(a: ProbeAnswer) -> str:
    reason = a.error or ", ".join(f"{k}={render.fmt(v)}" for k, v in a.metrics.items()) or "no reason given"
    return f"prompt {a.prompt} sample {a.sample}: score {render.fmt(a.score)} ({reason}): {a.answer[:120]!r}"


def reward_failures(facts: ProbeFacts) -> Verdict | None:
    """The reward function failed or timed out on some answers: which, and its error."""
    failed = [a for a in facts.answers if a.reward_failed]
    if not failed:
        return None
    return Verdict(
        code="reward-fails",
        severity="error",
        message=f"the reward function failed or timed out on {len(failed)} of {len(facts.answers)} answers; "
        "a job counts each as a failed call: fix the function (`opd test`, the playground) before submitting",
        evidence=[f"{a.side} prompt {a.prompt} sample {a.sample}: {a.error}" for a in failed[:SHOWN]],
    )


def reward_does_not_separate(facts: ProbeFacts) -> Verdict | None:
    """Every answer scored the same: every group has zero variance, so the reward teaches nothing."""
    if not facts.constant():
        return None
    score = facts.scores()[0]
    groups = facts.teacher.groups + facts.student.groups
    flat = facts.teacher.zero_variance_groups + facts.student.zero_variance_groups
    return Verdict(
        code="reward-does-not-separate",
        severity="error",
        message=f"every answer scored {render.fmt(score)}: the reward does not separate answers, so every "
        "group of samples has zero variance and the reward adds no learning signal; check the reward function",
        evidence=[f"{flat} of {groups} groups have zero variance ({facts.scorer})"],
    )


def reward_rejects_teacher(facts: ProbeFacts) -> Verdict | None:
    """The teacher's answers score near zero: the reward likely rejects good answers."""
    if not facts.teacher_near_zero():
        return None
    teacher = [a for a in facts.answers if a.side == "teacher" and a.calls]
    worst = sorted(teacher, key=lambda a: (a.score is not None, a.score or 0.0, a.prompt, a.sample))
    return Verdict(
        code="reward-rejects-teacher",
        severity="error",
        message=f"the teacher's answers score {render.fmt(facts.teacher.mean)} on average under {facts.scorer}: "
        "the reward function likely rejects good answers (answer format, cleanup, the ground truth's "
        "form); read the teacher's lowest-scoring answers beside the reward's reason",
        evidence=[_answer_line(a) for a in worst[:SHOWN]],
    )


def length_limit(facts: ProbeFacts) -> Verdict | None:
    """Answers hit the length limit: raise max_length (or the teacher's context)."""
    cut = [
        (name, side)
        for name, side in (("teacher", facts.teacher), ("student", facts.student))
        if side.truncated_share is not None and side.truncated_share >= TRUNCATED_SHARE
    ]
    if not cut:
        return None
    room = f" ({facts.max_tokens} tokens of answer room)" if facts.max_tokens else ""
    return Verdict(
        code="length-limit",
        severity="warning",
        message=f"answers hit the length limit{room}: raise max_length (or opd_teacher_max_model_len for the "
        "teacher's context); a cut answer usually scores nothing",
        evidence=[f"{name}: {render.fmt(side.truncated_share)} of answers cut" for name, side in cut],
    )


def headroom(facts: ProbeFacts) -> Verdict | None:
    """The teacher clearly beats the student (OPD can help), or does not (no headroom)."""
    t, s = facts.teacher.mean, facts.student.mean
    if t is None or s is None:
        return None  # one side has no score: the failures' verdict says why
    gap = t - s
    evidence = [
        f"teacher mean {render.fmt(t)} vs student mean {render.fmt(s)} (gap {render.fmt(gap)})",
        beats_text(facts.teacher_beats_share),
    ]
    if gap >= CLEAR_MARGIN and not facts.teacher_near_zero() and not facts.constant():
        if facts.job_estimate:
            evidence.append(f"the job (`opd estimate`): {facts.job_estimate}")
        return Verdict(
            code="opd-can-help",
            severity="ok",
            message="the teacher clearly beats the student on this reward: OPD can help",
            evidence=evidence,
        )
    return Verdict(
        code="no-headroom",
        severity="warning",
        message="the teacher does not clearly beat the student on this reward: OPD will not raise it; "
        "choose another teacher, or check that the reward measures what the teacher does better",
        evidence=evidence,
    )


RULES: tuple[Callable[[ProbeFacts], Verdict | None], ...] = (
    reward_failures,
    reward_does_not_separate,
    reward_rejects_teacher,
    length_limit,
    headroom,
)


def verdicts(facts: ProbeFacts) -> list[Verdict]:
    """Every rule's verdict, in order (the reward's own problems first)."""
    return [v for rule in RULES if (v := rule(facts)) is not None]
