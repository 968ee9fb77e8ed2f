"""Rollout records of agentic rounds: each trajectory with its assistant turns' tokens and log-probs.

Records (:mod:`opd_nb.engine.rollouts`) keep every call, failed ones included (with their error),
and mark which assistant turns were trained on and what was cut to fit ``max_length``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opd_nb.engine.agentic.samples import TurnRef

if TYPE_CHECKING:
    from opd_nb.engine.data import Row
    from opd_nb.engine.rollouts import Rollout
    from opd_nb.engine.scoring import TokenScores


@dataclass
class StepRollouts:
    """What one round of rollout calls produced, kept for the rollout records (:func:`to_record`)."""

    rows: list[Row]  # the rows the calls were made for
    groups: list[int]  # row index per call
    ok: list[int]  # calls that returned a trajectory
    trajs: list[dict[str, Any]]  # their agent_output, parallel to ok
    errors: dict[int, str]  # call index -> error, for failed calls
    # per trajectory, per assistant turn: (batch row holding its trained tokens or None, message index,
    # generated ids cut to fit max_length, generated without EOS)
    turns: list[list[TurnRef]]
    rewards: (
        list[dict[str, Any]] | None
    )  # per trajectory: reward_score / reward_metrics / reward_status / reward_error


def to_record(info: StepRollouts, scores: TokenScores | None, limit: int | None, step: int) -> list[Rollout]:
    """:class:`rollouts.Rollout` per call (a fair sample of at most `limit`; None: all), failed ones included."""
    from opd_nb.engine.native.records import turns
    from opd_nb.engine.rollouts import Rollout, Turn, fair_sample, ranks

    calls = list(range(len(info.groups)))
    sel = calls if limit is None else fair_sample(info.groups, limit, step)
    pos = {i: j for j, i in enumerate(info.ok)}
    rows_needed = [t[0] for i in sel if i in pos for t in info.turns[pos[i]] if t[0] is not None]
    scored = turns(scores, rows_needed)
    rank = ranks(info.groups)
    out: list[Rollout] = []
    for i in sel:
        g = info.groups[i]
        j = pos.get(i)
        if j is None:
            msgs = info.rows[g].messages
            out.append(Rollout(g, rank[i], msgs, [], agentic=True, error=info.errors.get(i, "failed")))
            continue
        trained: list[Turn] = []
        truncated = False
        for row, a, dropped, no_eos in info.turns[j]:
            base = scored[row] if row is not None else Turn([], [], [])
            trained.append(Turn(base.ids, base.student, base.teacher, message=a, dropped=dropped))
            truncated = truncated or bool(dropped) or no_eos
        reward = info.rewards[j] if info.rewards else None
        out.append(Rollout(g, rank[i], info.trajs[j]["messages"], trained, truncated, reward, agentic=True))
    return out
