"""Where a step's rollouts come from: the seam between the training loop and its two modes.

The trainer asks a :class:`RolloutSource` for each step's rollouts and each evaluation, and never
asks which mode it runs: native jobs sample the student themselves (:mod:`opd_nb.engine.native`),
agentic jobs let the user's rollout function drive it (:mod:`opd_nb.engine.agentic`). A source gets
the run's parts it uses (:class:`RolloutParts`) once, and the step it is at with each call, so it
depends on no trainer and the trainer on no mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from torch import Tensor
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    from opd_nb.engine.api import EngineJob
    from opd_nb.engine.batch import SeqBatch
    from opd_nb.engine.data import Row
    from opd_nb.engine.rollouts import Recorder, Rollout
    from opd_nb.engine.samplers import Sampler
    from opd_nb.engine.scoring import TokenScores


class Log(Protocol):
    """Tells the user something about the job (its log)."""

    def __call__(self, message: str, level: str = "INFO") -> None: ...


@dataclass(frozen=True)
class RolloutParts:
    """The parts of a job run that its rollouts use, built once by the trainer."""

    job: EngineJob  # the rollout and reward functions, the seed and the id every call carries
    tok: PreTrainedTokenizerBase  # the student's: templates trajectories, decodes what it serves
    max_total: int  # the context limit (max_length cut to the model's): bounds prompts and samples
    device: str  # where batches and advantages are built, with the student
    sampler: Sampler  # the student's completions
    score_tokens: Callable[[SeqBatch], TokenScores]  # no-grad student and teacher log-probs (records)
    log: Log


class Collected(Protocol):
    """One step's rollouts as the trainer uses them: the batch to score and train on, what collecting
    them measured, the task reward's advantage and the records."""

    @property
    def batch(self) -> SeqBatch: ...

    @property
    def metrics(self) -> dict[str, float]:
        """What collecting measured (the rollout function's metrics, its rewards), in row order."""
        ...

    @property
    def reward_seconds(self) -> float:
        """The reward functions' own time beside the teacher (0 when they ran while collecting)."""
        ...

    def task_advantage(self, metrics: dict[str, float]) -> Tensor | None:
        """The task reward's group-normalised advantage per sample (None without a task reward); waits
        for reward functions still scoring (beside the teacher) and adds their metrics to `metrics`."""
        ...

    def records(self, scores: TokenScores, limit: int | None, step: int) -> list[Rollout]:
        """The rollout records of step `step`: a fair sample of at most `limit` (None: all)."""
        ...


class RolloutSource(Protocol):
    """Where a job's rollouts come from (native sampling or the user's rollout function)."""

    def collect(self, rows: list[Row], n: int, temperature: float, where: str) -> Collected:
        """`n` rollouts per row at `temperature`; `where` names the step in messages and sample ids."""
        ...

    def evaluate(self, rows: list[Row], step: int, recorder: Recorder) -> dict[str, float]:
        """Validation metrics on `rows` after `step` steps, recorded through `recorder` when enabled."""
        ...

    def close(self) -> None:
        """Stop what the source started (endpoints, callers)."""
        ...
