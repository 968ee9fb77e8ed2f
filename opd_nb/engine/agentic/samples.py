"""Training samples from the trajectories a rollout function returned: one per assistant turn.

Each sample holds the ids the student actually generated for that turn (recorded by the endpoint),
in the context the trajectory gives it; the trained tokens are the assistant turns, tool results
and user turns are context only (:func:`opd_nb.engine.trajectory.turn_samples`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from opd_nb.engine.agentic.calls import RolloutRound
from opd_nb.engine.agentic.endpoint import Generation
from opd_nb.engine.api import EngineError
from opd_nb.engine.trajectory import turn_samples

if TYPE_CHECKING:
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    from opd_nb.engine.data import Row

# Per assistant turn of a trajectory: (batch row holding its trained tokens or None, message index,
# generated ids cut to fit max_length, generated without EOS).
TurnRef = tuple[int | None, int, list[int], bool]


@dataclass
class TurnSamples:
    """The samples of a round's trajectories, and where each assistant turn went."""

    seqs: list[list[int]]  # token ids per sample
    masks: list[list[bool]]  # trained-token mask per sample
    owner: list[int]  # owning trajectory (index into the round's ok) per sample
    texts: list[str]  # message text per sample
    turns: list[list[TurnRef]]  # per trajectory, per assistant turn
    missing: int  # turns not generated through the endpoint (trained on their templated tokens)


def turn_samples_of(
    tok: PreTrainedTokenizerBase,
    max_total: int,
    generation: Generation,
    rows: list[Row],
    rnd: RolloutRound,
    where: str,
) -> TurnSamples:
    """Training samples, one per assistant turn, with the ids the student actually generated (cut to
    the context limit `max_total`)."""
    out = TurnSamples([], [], [], [], [], 0)
    for j, (i, t) in enumerate(zip(rnd.ok, rnd.trajs, strict=True)):
        msgs = t["messages"]
        token = rnd.tokens[i]
        # the tools the rollout offered the endpoint (the row's own when it sent no `tools`; an offered
        # `[]` stays "no tools": the student was prompted without any)
        offered = generation.offered.get(token)
        tools = offered if offered is not None else rows[rnd.groups[i]].tools
        try:
            cut = turn_samples(tok, msgs, tools, generation.records.get(token, []), max_total)
        except Exception as exc:  # noqa: BLE001
            raise EngineError(
                f"{where}: the chat template failed on a trajectory returned by the rollout function: {exc}"
            ) from exc
        mine: list[TurnRef] = []
        out.turns.append(mine)
        for ts in cut:
            out.missing += not ts.generated
            if not any(ts.mask):
                mine.append((None, ts.index, ts.dropped, ts.no_eos))
                continue
            mine.append((len(out.seqs), ts.index, ts.dropped, ts.no_eos))
            out.seqs.append(ts.ids)
            out.masks.append(ts.mask)
            out.owner.append(j)
            out.texts.append(msgs[ts.index].get("content") or "")
    return out
