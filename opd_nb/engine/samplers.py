"""The seam for generation backends: what the engine asks of a sampler, and the samplers by name.

Why a protocol: native rollouts, validation answers and the agentic endpoint only need batched
completions of token-id prompts, so another backend (a vLLM engine, a remote server) can stand in
for the in-process decode loop (:class:`opd_nb.engine.sampling.TorchSampler`). A new one is its class
and one line in :data:`SAMPLERS`; ``EngineJob.sampler`` picks it. Whatever the backend, a row's
draws come from the job's RNG or from its own seed (``seeds``), never from which rows shared a batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from opd_nb.engine.api import EngineError
from opd_nb.engine.sampling import TorchSampler

if TYPE_CHECKING:
    from opd_nb.engine.batch import SeqBatch
    from opd_nb.engine.models import Models


class Sampler(Protocol):
    """Batched completions from the student, as the engine's rollouts and evaluations ask for them."""

    def generate(
        self, prompt_ids: list[list[int]], groups: list[int], *, temperature: float, logprobs: bool = False
    ) -> SeqBatch:
        """One completion per prompt (temperature 0: greedy) as a :class:`~opd_nb.engine.batch.SeqBatch`
        on the training device: the completions marked as trained tokens up to and including EOS,
        ``texts`` decoded, ``truncated`` set; `logprobs` (greedy): the chosen tokens' log-probs too."""
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
        """Per prompt: the completion's ids (with EOS when produced) and whether it ended with EOS within
        its budget (`max_new`, one or per row, cut to what its own prompt leaves of the context);
        `seeds`: each row's own random stream."""
        ...


# How a sampler is built for a job: from the loaded pair and the context limit.
SamplerClass = Callable[["Models", int], Sampler]

# The samplers by name (``EngineJob.sampler``): a new one is its class and one line here.
SAMPLERS: dict[str, SamplerClass] = {
    "torch": TorchSampler.for_student,
}


def make_sampler(name: str, models: Models, max_total: int) -> Sampler:
    """The sampler `name` for the job's student."""
    cls = SAMPLERS.get(name)
    if cls is None:
        raise EngineError(f"unknown sampler {name!r}; use one of {', '.join(SAMPLERS)}")
    return cls(models, max_total)
