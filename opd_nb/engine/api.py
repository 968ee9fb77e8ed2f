"""The contract between the local control plane and the engine (no torch at import).

The server's job worker builds an :class:`EngineJob` from a submitted job, starts the function
servers the job registered, and calls ``opd_nb.engine.trainer.run(job, events, should_stop)``.
The engine reports through :class:`EngineEvents`; the worker stores what it hears.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from opd_nb.spec.training_plan import TrainingPlan

METRICS_FILE = (
    "metrics.jsonl"  # one JSON row per step in the job's output dir (the trainer writes, resume trims)
)


class RewardEndpoint(BaseModel):
    """A registered reward (or group reward) function served over HTTP by the SDK's function server."""

    name: str
    url: str  # base URL of the function server; the engine POSTs to f"{url}/api/v1"
    kind: Literal["reward", "group_reward"] = "reward"
    weight: float = 1.0
    timeout: float = 30.0  # seconds per call
    concurrency: int = 4  # concurrent calls in flight
    reward_metric_weight: dict[str, float] | None = None
    reconnect_s: float = 0.0  # how long a refused call waits for its server to be restarted (the worker's)


class RolloutEndpoint(BaseModel):
    """A registered rollout function (agentic mode)."""

    name: str
    url: str
    timeout: float = 120.0
    concurrency: int = 4
    reconnect_s: float = 0.0  # how long a refused call waits for its server to be restarted (the worker's)


class EngineJob(BaseModel):
    """Everything the engine needs to run one job; paths are local."""

    job_id: str
    student_path: str  # Hugging Face causal-LM directory (or a published checkpoint)
    teacher_path: str
    train_file: str  # JSONL in Bailian's format
    validation_file: str | None = None
    # typed and checked where the job was read (a mapping given here is read the same way)
    hyper_parameters: TrainingPlan = Field(default_factory=TrainingPlan)
    algorithm: str | None = (
        None  # an estimator in engine/estimators.py's REGISTRY; None: hyper_parameters.algorithm
    )
    sampler: str = "torch"  # the generation backend: a name in engine/samplers.py's SAMPLERS
    rewards: list[RewardEndpoint] = Field(default_factory=list[RewardEndpoint])
    rollout: RolloutEndpoint | None = None
    output_dir: str  # checkpoints/ and metrics.jsonl go here
    resume_from: str | None = None  # a checkpoint-{step} directory with trainer state
    seed: int = 0
    device: str | None = None  # None: cuda when available, else cpu
    local_learning_rate: float | None = (
        None  # local-only LR override (see opd_nb.engine.hparams); None: the rule
    )


class EngineResult(BaseModel):
    final_checkpoint: str  # directory in Hugging Face format, published as finetuned_output
    steps: int
    epochs: int
    metrics_tail: dict[str, float] = Field(default_factory=dict)


class EngineEvents(Protocol):
    """Callbacks the engine calls from its own thread; implementations must be cheap."""

    def log(self, message: str, level: str = "INFO") -> None: ...

    def progress(
        self, step: int, total_steps: int, epoch: int, n_epochs: int, eta_s: float | None
    ) -> None: ...

    def metrics(self, row: dict[str, Any]) -> None: ...  # one row per step, includes "step"

    def checkpoint(self, step: int, path: str, metrics: dict[str, float]) -> None: ...


class EngineError(Exception):
    """A job-level failure explained in plain words (bad data, broken reward, mismatched vocab)."""
