"""Native rollouts: the student samples ``n`` completions per prompt itself (jobs without a rollout function).

The reward functions score a step's completions while the teacher scores the same tokens: the calls
start when the rollouts are collected and are waited for when the trainer asks for the task advantage.
Validation is the :class:`~opd_nb.engine.native.evaluator.Evaluator`'s greedy answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opd_nb.constants import ZERO_VARIANCE_GROUPS
from opd_nb.engine.native.evaluator import Evaluator

if TYPE_CHECKING:
    from torch import Tensor

    from opd_nb.engine.batch import SeqBatch
    from opd_nb.engine.data import Row
    from opd_nb.engine.rewards import PendingScores, RewardCaller, RewardResult
    from opd_nb.engine.rollout_source import RolloutParts
    from opd_nb.engine.rollouts import Recorder, Rollout
    from opd_nb.engine.scoring import TokenScores


class NativeStep:
    """One step's native rollouts (a :class:`~opd_nb.engine.rollout_source.Collected`)."""

    def __init__(self, rows: list[Row], batch: SeqBatch, pending: PendingScores | None, device: str):
        self.rows, self.batch, self.pending, self.device = rows, batch, pending, device
        self.metrics: dict[str, float] = {}  # sampling measures nothing of its own
        self._scored: RewardResult | None = None

    @property
    def reward_seconds(self) -> float:
        return 0.0 if self.pending is None else self.pending.seconds

    def task_advantage(self, metrics: dict[str, float]) -> Tensor | None:
        """The reward functions' metrics into `metrics`; their group-normalised advantage per sample."""
        if self.pending is None:
            return None
        import torch

        from opd_nb.engine import rewards
        from opd_nb.engine.batch import values

        res = self._scored = self.pending.result()
        metrics.update(res.metrics)
        groups: list[int] = values(self.batch.group)
        metrics[ZERO_VARIANCE_GROUPS] = rewards.zero_variance_fraction(res.totals, groups)
        adv = rewards.group_advantages(res.totals, groups)
        return torch.tensor(adv, dtype=torch.float32, device=self.device)

    def records(self, scores: TokenScores, limit: int | None, step: int) -> list[Rollout]:
        from opd_nb.engine.native.records import native_rollouts

        per = self._scored.per_sample if self._scored is not None else None
        return native_rollouts(self.rows, self.batch, scores, per, limit, step)


class NativeRollouts:
    """The rollout source of native jobs (a :class:`~opd_nb.engine.rollout_source.RolloutSource`)."""

    def __init__(self, parts: RolloutParts, n_rollouts: int):
        from opd_nb.engine.rewards import RewardCaller

        self.parts = parts
        job = parts.job
        self.reward_caller: RewardCaller | None = RewardCaller() if job.rewards else None
        self.evaluator = Evaluator(job, parts.sampler, parts.score_tokens, self.reward_caller, parts.log)
        if job.rewards and n_rollouts < 2:
            parts.log(
                "n_rollouts = 1 with a reward: the group-normalised task advantage is always 0; "
                "use n_rollouts >= 2 for the reward to matter",
                "WARNING",
            )

    def sample(self, rows: list[Row], n: int, temperature: float) -> SeqBatch:
        """`n` sampled completions per row, as a SeqBatch whose ``messages`` end with each answer."""
        prompt_ids = [r.prompt_ids for r in rows for _ in range(n)]
        groups = [g for g in range(len(rows)) for _ in range(n)]
        b = self.parts.sampler.generate(prompt_ids, groups, temperature=temperature)
        b.messages = [
            rows[g].messages + [{"role": "assistant", "content": t}]
            for g, t in zip(groups, b.texts, strict=True)
        ]
        return b

    def collect(self, rows: list[Row], n: int, temperature: float, where: str) -> NativeStep:
        """The step's completions, the reward functions already scoring them (beside the teacher)."""
        from opd_nb.engine.native.records import reward_samples

        b = self.sample(rows, n, temperature)
        pending = None
        job = self.parts.job
        if self.reward_caller is not None:
            samples = reward_samples(rows, b, where)
            pending = self.reward_caller.submit(
                job.rewards, samples, job.job_id, where=where, log=self.parts.log
            )
        return NativeStep(rows, b, pending, self.parts.device)

    def evaluate(self, rows: list[Row], step: int, recorder: Recorder) -> dict[str, float]:
        return self.evaluator.evaluate(rows, step, recorder)

    def close(self) -> None:
        if self.reward_caller is not None:
            self.reward_caller.close()
