"""Native rollouts as records and reward samples: built from the tensors a step already has.

Why here and not in :mod:`opd_nb.engine.rollouts`: that module (the records' shapes, writer and
reader) imports without torch for the control plane; these read a step's batch and its
:class:`~opd_nb.engine.scoring.TokenScores`. Agentic rollouts have their own records
(:mod:`opd_nb.engine.agentic.records`), whose turns are :func:`turns` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opd_nb.engine.batch import SeqBatch
    from opd_nb.engine.data import Row
    from opd_nb.engine.rewards import Sample
    from opd_nb.engine.rollouts import Rollout, Turn
    from opd_nb.engine.scoring import TokenScores


def turns(scores: TokenScores | None, rows: list[int]) -> dict[int, Turn]:
    """A :class:`rollouts.Turn` (trained tokens and both log-probs) per batch row in `rows` (none without
    scores: a round with nothing trained)."""
    import torch

    from opd_nb.engine.rollouts import Turn

    if not rows or scores is None:
        return {}
    idx = torch.tensor(rows, device=scores.ids.device)
    cols = [x[idx].tolist() for x in (scores.ids, scores.mask, scores.valid, scores.student, scores.teacher)]
    out: dict[int, Turn] = {}
    for r, ids, tm, va, s, t in zip(rows, *cols, strict=True):
        keep = [j for j, m in enumerate(tm) if m]
        out[r] = Turn(
            ids=[ids[j] for j in keep],
            student=[s[j] for j in keep],
            teacher=[t[j] if va[j] else None for j in keep],
        )
    return out


def native_rollouts(
    rows: list[Row],
    b: SeqBatch,
    scores: TokenScores,
    per: list[dict[str, Any]] | None,
    limit: int | None,
    step: int,
) -> list[Rollout]:
    """Records of native rollouts: a fair sample (seeded by `step`) of at most `limit` (None: all), in batch
    order of groups; `per`: each sample's reward record, if scored."""
    from opd_nb.engine.batch import values
    from opd_nb.engine.rollouts import Rollout, fair_sample, ranks

    groups: list[int] = values(b.group)
    sel = list(range(len(groups))) if limit is None else fair_sample(groups, limit, step)
    scored = turns(scores, sel)
    rank = ranks(groups)
    trunc: list[bool] = values(b.truncated) if b.truncated is not None else [False] * len(groups)
    return [
        Rollout(
            group=groups[j],
            sample=rank[j],
            messages=rows[groups[j]].messages,
            turns=[scored[j]],
            truncated=bool(trunc[j]),
            reward=per[j] if per else None,
        )
        for j in sel
    ]


def reward_samples(rows: list[Row], b: SeqBatch, where: str) -> list[Sample]:
    """What the reward functions score for a step's native rollouts (``b.messages`` end with each answer)."""
    from opd_nb.engine import rewards
    from opd_nb.engine.batch import values
    from opd_nb.engine.rollouts import ranks
    from opd_nb.traces.ids import sample_id

    groups: list[int] = values(b.group)
    rank = ranks(groups)  # a sample's index within its prompt's group: the record's `sample`
    return [
        rewards.Sample(
            messages=b.messages[i],
            rollout_extra=rows[g].rollout_extra,
            group=g,
            sample_id=sample_id(where, g),
            rollout_id=str(rank[i]),
        )
        for i, g in enumerate(groups)
    ]
