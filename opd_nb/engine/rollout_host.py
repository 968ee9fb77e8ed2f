"""What agentic rollouts need from the run that hosts them (the trainer's job run).

:class:`opd_nb.engine.agentic.Agentic` serves the student to the user's rollout function and turns the
trajectories it returns into training samples and rollout records. It reads a dozen things of the run
(its job, tokenizer, device, generation and scoring, the reward caller, the records) while the run holds
the ``Agentic``: this protocol names that coupling, so neither side depends on the other's insides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opd_nb.engine.api import EngineJob
    from opd_nb.engine.batch import SeqBatch
    from opd_nb.engine.hparams import Plan
    from opd_nb.engine.rewards import RewardCaller
    from opd_nb.engine.rollouts import Recorder
    from opd_nb.engine.scoring import TokenScores


class RolloutHost(Protocol):
    """The members of a job run that agentic rollouts use (the trainer's run satisfies it)."""

    job: EngineJob
    """The job: its rollout endpoint, reward functions, seed and id go into every rollout call."""

    tok: Any
    """The student's tokenizer: templates trajectories and decodes the completions the endpoint serves."""

    max_total: int
    """The context limit (max_length cut to the model's): bounds prompts, completions and samples."""

    device: str
    """Where training batches and advantages are built, so they sit with the student."""

    plan: Plan
    """The resolved hyper-parameters: the sampling temperature of training rollouts."""

    recorder: Recorder
    """The rollout records writer: validation trajectories are written through it."""

    reward_caller: RewardCaller | None
    """Calls the job's reward functions on returned trajectories (None when the job has none)."""

    @property
    def step(self) -> int:
        """The number of steps done so far: names the validation records and their fair sample."""
        ...

    def log(self, message: str, level: str = "INFO") -> None:
        """Tell the user about failed, malformed or untrainable rollouts."""
        ...

    def generate_ids(
        self,
        prompt_ids: list[list[int]],
        *,
        temperature: float,
        top_p: float,
        max_new: int | list[int],
        seeds: list[int] | None = None,
    ) -> list[tuple[list[int], bool]]:
        """Generate the endpoint's completions with the student (ids, ended with EOS) per prompt."""
        ...

    def score_tokens(self, b: SeqBatch) -> TokenScores:
        """No-grad student and teacher log-probs of validation tokens, for the validation records."""
        ...

    def turns(self, scores: TokenScores | None, rows: list[int]) -> dict[int, Any]:
        """A ``rollouts.Turn`` (tokens and both log-probs) per scored batch row, for the records."""
        ...
