"""Agentic mode: the user's rollout function drives the student through an OpenAI-compatible API.

For each step the engine serves the student at ``http://127.0.0.1:PORT/v1/chat/completions``
(:mod:`opd_nb.engine.agentic.endpoint`) and calls the rollout function server
(:mod:`opd_nb.engine.agentic.calls`) with ``model_resource = {model_name, base_url, api_key}``, where
``api_key`` is a fresh per-rollout token. Every completion's token ids are recorded under the
rollout's token, so training uses exactly the ids the student sampled; the trained tokens are the
assistant turns of the trajectory the rollout function returns (:mod:`opd_nb.engine.agentic.samples`).
Rollout records (:mod:`opd_nb.engine.agentic.records`, :mod:`opd_nb.engine.rollouts`) keep each
trajectory with its assistant turns' tokens, marking which were trained on.

:class:`Agentic` is the job's :class:`~opd_nb.engine.rollout_source.RolloutSource`; it gets the run's
parts it uses (:class:`~opd_nb.engine.rollout_source.RolloutParts`), never the run itself.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from opd_nb.constants import (
    REWARD_MEAN,
    TRAIN_REWARD_MEAN,
    VALIDATION_ACCURACY,
    VALIDATION_RECORD_SECONDS,
    ZERO_VARIANCE_GROUPS,
)
from opd_nb.engine.agentic.calls import RolloutCalls, RolloutRound
from opd_nb.engine.agentic.endpoint import MODEL_NAME, Generation, StudentEndpoint
from opd_nb.engine.agentic.records import StepRollouts, to_record
from opd_nb.engine.agentic.samples import turn_samples_of
from opd_nb.engine.api import EngineError
from opd_nb.traces import ids as trace_ids

if TYPE_CHECKING:
    from torch import Tensor

    from opd_nb.engine.api import RolloutEndpoint
    from opd_nb.engine.batch import SeqBatch
    from opd_nb.engine.data import Row
    from opd_nb.engine.rewards import RewardCaller
    from opd_nb.engine.rollout_source import RolloutParts
    from opd_nb.engine.rollouts import Recorder, Rollout
    from opd_nb.engine.scoring import TokenScores

__all__ = ["Agentic", "AgenticStep", "StepRollouts"]

# What a round's task scores are: (reward metrics, total per trajectory or None, record fields per
# trajectory or None).
TaskScores = tuple[dict[str, float], list[float] | None, list[dict[str, Any]] | None]


class AgenticStep:
    """One step's agentic rollouts (a :class:`~opd_nb.engine.rollout_source.Collected`): scored while
    collected, so the task advantage is ready and the reward functions add no time beside the teacher."""

    reward_seconds = 0.0

    def __init__(self, batch: SeqBatch, metrics: dict[str, float], adv: Tensor | None, info: StepRollouts):
        self.batch, self.metrics, self.adv, self.info = batch, metrics, adv, info

    def task_advantage(self, metrics: dict[str, float]) -> Tensor | None:
        return self.adv  # its reward metrics are in self.metrics already

    def records(self, scores: TokenScores, limit: int | None, step: int) -> list[Rollout]:
        return to_record(self.info, scores, limit, step)


class Agentic:
    """Per-job agentic rollouts (owns the endpoint; the trainer calls :meth:`collect` each step)."""

    def __init__(self, parts: RolloutParts, rollout: RolloutEndpoint):
        from opd_nb.engine.rewards import RewardCaller

        self.parts = parts
        self.endpoint = StudentEndpoint(parts.tok, MODEL_NAME, parts.max_total)
        self.generation = Generation(parts.sampler, parts.tok, self.endpoint)
        self.calls = RolloutCalls(parts, rollout, self.endpoint, self.generation)
        self.reward_caller: RewardCaller | None = RewardCaller() if parts.job.rewards else None
        parts.log(
            f"agentic mode: student served at {self.endpoint.base_url} for the rollout function "
            f"{rollout.name!r} ({rollout.url})"
        )

    def close(self) -> None:
        self.calls.close()
        self.endpoint.close()
        if self.reward_caller is not None:
            self.reward_caller.close()

    def _task_scores(self, rows: list[Row], rnd: RolloutRound, where: str) -> TaskScores:
        """(reward metrics, total per trajectory or None, record fields per trajectory or None): the job's
        reward functions, else the rollout's own ``reward_score`` when every trajectory carries one."""
        from opd_nb.engine import rewards
        from opd_nb.engine.rollouts import ranks

        job, groups, trajs = self.parts.job, rnd.groups, rnd.trajs
        if self.reward_caller is not None:
            rank = ranks(
                groups
            )  # the call's index within its row: its rollout id, as the rollout call had it
            samples = [
                rewards.Sample(
                    messages=t["messages"],
                    rollout_extra=rows[groups[i]].rollout_extra,
                    group=groups[i],
                    sample_id=trace_ids.sample_id(where, groups[i]),
                    rollout_id=str(rank[i]),
                )
                for i, t in zip(rnd.ok, trajs, strict=True)
            ]
            res = self.reward_caller.submit(
                job.rewards, samples, job.job_id, where=where, log=self.parts.log
            ).result()
            return dict(res.metrics), res.totals, res.per_sample
        if trajs and all(isinstance(t.get("reward_score"), int | float) for t in trajs):
            totals = [float(t["reward_score"]) for t in trajs]
            per: list[dict[str, Any]] = [
                {"reward_score": x, "reward_metrics": {}, "reward_status": "success", "reward_error": None}
                for x in totals
            ]
            return {TRAIN_REWARD_MEAN: sum(totals) / len(totals)}, totals, per
        return {}, None, None

    def evaluate(self, rows: list[Row], step: int, recorder: Recorder) -> dict[str, float]:
        """One greedy rollout per validation row through the rollout function, as training rollouts run:
        ``validation/data/reward/mean@1`` (with a reward) and ``validation/accuracy`` (task rows, judged on
        the trajectory's last assistant message; a failed rollout counts as wrong)."""
        from opd_nb.engine import task

        where = trace_ids.where("validation", step)
        rnd = self.calls.run(rows, 1, where, temperature=0.0)
        out: dict[str, float] = {}
        last = {
            rnd.groups[i]: next(
                (m.get("content") or "" for m in reversed(t["messages"]) if m.get("role") == "assistant"), ""
            )
            for i, t in zip(rnd.ok, rnd.trajs, strict=True)
        }
        solved = [(g, r.solution) for g, r in enumerate(rows) if isinstance(r.solution, str)]
        if solved:
            out[VALIDATION_ACCURACY] = sum(
                g in last and task.is_correct(last[g], sol) for g, sol in solved
            ) / len(solved)
        _, totals, per = self._task_scores(rows, rnd, where)
        good = [x for x in (totals or []) if not math.isnan(x)]
        if good:
            out[REWARD_MEAN] = sum(good) / len(good)
        if recorder.enabled:
            t0 = time.perf_counter()
            info = StepRollouts(rows, rnd.groups, rnd.ok, rnd.trajs, rnd.errors, [], per)
            self._record_validation(info, rnd, where, step, recorder)
            out[VALIDATION_RECORD_SECONDS] = time.perf_counter() - t0
        return out

    def _record_validation(
        self, info: StepRollouts, rnd: RolloutRound, where: str, step: int, recorder: Recorder
    ) -> None:
        """Write the validation trajectories, their tokens scored by one no-grad student and teacher pass."""
        from opd_nb.engine.batch import left_pad
        from opd_nb.engine.models import pad_id

        parts = self.parts
        try:
            ts = turn_samples_of(parts.tok, parts.max_total, self.generation, info.rows, rnd, where)
        except EngineError as exc:
            parts.log(f"{where}: the validation rollouts were not recorded: {exc}", "WARNING")
            return
        info.turns = ts.turns
        scores = None
        if ts.seqs:
            pad = pad_id(parts.tok)
            scores = parts.score_tokens(left_pad(ts.seqs, ts.masks, [0] * len(ts.seqs), pad, parts.device))
        recorder.write("validation", step, to_record(info, scores, None, step))

    def collect(self, rows: list[Row], n: int, temperature: float, where: str) -> AgenticStep:
        """Run n rollouts per row: the assistant turns as a batch, the reward metrics, the task advantages
        and the :class:`StepRollouts` for the records."""
        from opd_nb.engine import rewards
        from opd_nb.engine.batch import left_pad
        from opd_nb.engine.models import pad_id

        parts = self.parts
        rnd = self.calls.run(rows, n, where, temperature)
        metrics = rnd.metrics
        reward_metrics, totals, per = self._task_scores(rows, rnd, where)
        metrics.update(reward_metrics)
        adv = None
        if totals is not None:
            ok_groups = [rnd.groups[i] for i in rnd.ok]
            metrics[ZERO_VARIANCE_GROUPS] = rewards.zero_variance_fraction(totals, ok_groups)
            adv = rewards.group_advantages(totals, ok_groups)
        ts = turn_samples_of(parts.tok, parts.max_total, self.generation, rows, rnd, where)
        if ts.missing:
            parts.log(
                f"{where}: {ts.missing} assistant turn(s) were not generated through the student endpoint; "
                "trained on their templated tokens instead",
                "WARNING",
            )
        if not ts.seqs:
            raise EngineError(f"{where}: the rollout trajectories contain no assistant turns to train on")
        groups = [rnd.groups[rnd.ok[j]] for j in ts.owner]
        b = left_pad(ts.seqs, ts.masks, groups, pad_id(parts.tok), parts.device)
        b.texts = ts.texts
        import torch

        adv_t = None
        if adv is not None:
            adv_t = torch.nan_to_num(
                torch.tensor([adv[j] for j in ts.owner], dtype=torch.float32, device=parts.device)
            )
        info = StepRollouts(rows, rnd.groups, rnd.ok, rnd.trajs, rnd.errors, ts.turns, per)
        return AgenticStep(b, metrics, adv_t, info)
