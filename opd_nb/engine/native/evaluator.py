"""Evaluation of native jobs: one greedy answer per validation prompt, scored like Bailian's validation.

``validation/accuracy``: the task's exact match on rows with a ``solution``; with reward functions
(and no rollout function), ``validation/data/reward/mean@1``: their mean total. With recording on,
every answer is recorded with both models' per-token log-probs. Agentic jobs validate through the
rollout function instead (:meth:`opd_nb.engine.agentic.source.Agentic.evaluate`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opd_nb.constants import REWARD_MEAN, VALIDATION_ACCURACY, VALIDATION_RECORD_SECONDS
from opd_nb.traces import ids as trace_ids

if TYPE_CHECKING:
    from opd_nb.engine.api import EngineJob
    from opd_nb.engine.batch import SeqBatch
    from opd_nb.engine.data import Row
    from opd_nb.engine.rewards import RewardCaller
    from opd_nb.engine.rollout_source import Log
    from opd_nb.engine.rollouts import Recorder, Rollout
    from opd_nb.engine.samplers import Sampler
    from opd_nb.engine.scoring import TokenScores

CHUNK = 512  # validation prompts per greedy decode


class Evaluator:
    """Greedy validation answers, their accuracy and reward, and their records."""

    def __init__(
        self,
        job: EngineJob,
        sampler: Sampler,
        score_tokens: Callable[[SeqBatch], TokenScores],
        reward_caller: RewardCaller | None,
        log: Log,
    ):
        self.job, self.sampler = job, sampler
        self.score_tokens, self.reward_caller, self.log = score_tokens, reward_caller, log

    def evaluate(self, rows: list[Row], step: int, recorder: Recorder) -> dict[str, float]:
        """Validation metrics on `rows` after `step` steps (records written through `recorder` when it is
        enabled)."""
        from opd_nb.engine import task
        from opd_nb.engine.batch import values

        out: dict[str, float] = {}
        texts: list[str] = []
        batches: list[SeqBatch] = []
        per = None
        for s in range(0, len(rows), CHUNK):
            part = rows[s : s + CHUNK]
            b = self.sampler.generate(
                [r.prompt_ids for r in part],
                list(range(s, s + len(part))),
                temperature=0.0,
                logprobs=recorder.enabled,
            )
            truncated: list[bool] = values(b.truncated) if b.truncated is not None else [False] * len(b)
            texts.extend(t if not truncated[j] else "\x00" for j, t in enumerate(b.texts))
            batches.append(b)
        solved = [(t, r.solution) for t, r in zip(texts, rows, strict=True) if isinstance(r.solution, str)]
        if solved:
            out[VALIDATION_ACCURACY] = sum(task.is_correct(t, s) for t, s in solved) / len(solved)
        if self.reward_caller is not None:
            per = self._rewards(self.reward_caller, rows, texts, step, out)
        if recorder.enabled:
            self._record(rows, batches, per, step, recorder, out)
        return out

    def _rewards(
        self, caller: RewardCaller, rows: list[Row], texts: list[str], step: int, out: dict[str, float]
    ) -> list[dict[str, Any]]:
        """Score the answers with the job's reward functions -> their per-sample records."""
        from opd_nb.engine import rewards

        where = trace_ids.where("validation", step)
        samples = [
            rewards.Sample(
                messages=r.messages + [{"role": "assistant", "content": t.replace("\x00", "")}],
                rollout_extra=r.rollout_extra,
                group=i,
                sample_id=trace_ids.sample_id(where, i),
                rollout_id="0",
            )
            for i, (t, r) in enumerate(zip(texts, rows, strict=True))
        ]
        res = caller.submit(self.job.rewards, samples, self.job.job_id, where=where, log=self.log).result()
        ok = [x for x in res.totals if not math.isnan(x)]
        if ok:
            out[REWARD_MEAN] = sum(ok) / len(ok)
        return res.per_sample

    def _record(
        self,
        rows: list[Row],
        batches: list[SeqBatch],
        per: list[dict[str, Any]] | None,
        step: int,
        recorder: Recorder,
        out: dict[str, float],
    ) -> None:
        from opd_nb.engine.native.records import native_rollouts

        t0 = time.perf_counter()
        recs: list[Rollout] = []
        for s, b in zip(range(0, len(rows), CHUNK), batches, strict=True):
            part = per[s : s + len(b)] if per else None
            recs.extend(native_rollouts(rows, b, self.score_tokens(b), part, None, step))
        recorder.write("validation", step, recs)
        out[VALIDATION_RECORD_SECONDS] = time.perf_counter() - t0
