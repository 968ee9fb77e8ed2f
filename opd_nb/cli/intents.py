"""Typed intents: what a command returns when its answer is something to follow or browse, not a value.

``opd watch JOB`` answers "watch this job on that control plane", ``opd rollouts JOB`` "this job's
samples at that step": the same typed result on every surface. Each front end decides how to present
it: a terminal follows the watch or prints the step (``opd_nb.cli``), the notebook opens the live view
that pages on its own (``opd_nb.notebook.views``, the one mapping of result types to widgets, which
imports them from here: the notebook sits on the CLI's floor above, as its parser's caller).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opd_nb.results import ResultMixin

if TYPE_CHECKING:  # the client imports httpx: not at parser-build time
    from opd_nb.client import Target
    from opd_nb.experiments import SweepResult
    from opd_nb.health.rules import GuardThresholds


@dataclass(frozen=True)
class WatchRequest(ResultMixin):
    """Follow `job_ids` over `target` until they end, with the guard and trackers asked for."""

    job_ids: tuple[str, ...]
    target: Target
    guard: GuardThresholds | None = None  # the monitor starts with its guard switch on, at these
    report_to: tuple[str, ...] = ()  # trackers the monitor writes the jobs to (`--report-to`)
    notify: bool = False  # `--notify` given: its URL stays in the CLI (invoke() hands none back)

    def to_payload(self) -> dict[str, Any]:
        return {
            "view": "monitor",
            "job_ids": list(self.job_ids),
            "target": self.target.kind,
            "base_url": self.target.base_url,
            "guard": self.guard is not None,
            "report_to": list(self.report_to),
            "notify": self.notify,
        }

    def __str__(self) -> str:
        return f"watch {', '.join(self.job_ids)} on {self.target.kind} {self.target.base_url}"


@dataclass(frozen=True)
class RolloutsRequest(ResultMixin):
    """Browse the recorded samples of `job_id` over `target`, at `step` (None: the latest) and `kind`."""

    job_id: str
    target: Target
    step: int | None = None
    kind: str | None = None  # "train" | "validation" | None (both)
    sort: str = "order"  # a key of opd_nb.client.rollout_results.SORTS
    limit: int | None = None  # at most this many samples per step (None: all recorded)

    def to_payload(self) -> dict[str, Any]:
        return {
            "view": "rollouts",
            "job_id": self.job_id,
            "target": self.target.kind,
            "base_url": self.target.base_url,
            "step": self.step,
            "kind": self.kind,
            "sort": self.sort,
            "limit": self.limit,
        }

    def __str__(self) -> str:
        at = f" step {self.step}" if self.step is not None else ""
        return f"rollouts of {self.job_id}{at} on {self.target.kind} {self.target.base_url}"


@dataclass(frozen=True)
class TracesRequest(ResultMixin):
    """Browse the spans of `job_id` over `target`: `step` (None: the latest), one record's
    `group`/`sample` when given."""

    job_id: str
    target: Target
    step: int | None = None
    kind: str | None = None
    group: int | None = None
    sample: int | None = None
    limit: int | None = None  # at most this many trajectories (None: all of the step)

    def to_payload(self) -> dict[str, Any]:
        return {
            "view": "traces",
            "job_id": self.job_id,
            "target": self.target.kind,
            "base_url": self.target.base_url,
            "step": self.step,
            "kind": self.kind,
            "group": self.group,
            "sample": self.sample,
            "limit": self.limit,
        }

    def __str__(self) -> str:
        at = f" step {self.step}" if self.step is not None else ""
        return f"traces of {self.job_id}{at} on {self.target.kind} {self.target.base_url}"


@dataclass(frozen=True)
class FormRequest(ResultMixin):
    """Edit `config` of `workspace` (a folder or its config file), checked against `target`'s rules."""

    workspace: str
    config: str = "config.yaml"
    target: str | None = None  # None: the target the kernel points at (`%opd use`)

    def __str__(self) -> str:
        return f"config form for {self.config} of {self.workspace}"


@dataclass(frozen=True)
class PlaygroundRequest(ResultMixin):
    """Try `workspace`'s reward (scoring with `processor_class`, or its own) on candidate answers."""

    workspace: str
    processor_class: str | None = None
    concurrency: int = 8

    def __str__(self) -> str:
        return f"reward playground for {self.workspace}"


@dataclass(frozen=True)
class ConfigCellRequest(ResultMixin):
    """Check the ``%%opd config`` cell's YAML `body`; write it to `path` only if it has no errors."""

    body: str | None = field(repr=False)  # None: the command ran without a cell
    path: str = "."
    target: str | None = None  # None: the target the kernel points at (`%opd use`)

    def __str__(self) -> str:
        return f"check the cell's YAML and write it to {self.path} if clean"


@dataclass(frozen=True)
class SweepRequest(ResultMixin):
    """Follow a submitted sweep's jobs together over `target` (the sweep does not carry its key)."""

    sweep: SweepResult
    target: Target

    def to_payload(self) -> dict[str, Any]:
        return {"view": "sweep", **self.sweep.to_payload(), "base_url": self.target.base_url}

    def __str__(self) -> str:
        return str(self.sweep)


@dataclass(frozen=True)
class ChatRequest(ResultMixin):
    """Talk to `model` (a deployment or a base model) over `target`."""

    model: str
    target: Target
    message: str | None = None  # sent as soon as the widget opens
    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None

    def to_payload(self) -> dict[str, Any]:
        return {
            "view": "chat",
            "model": self.model,
            "target": self.target.kind,
            "base_url": self.target.base_url,
        }

    def __str__(self) -> str:
        return f"chat with {self.model} on {self.target.kind} {self.target.base_url}"


@dataclass(frozen=True)
class EvalRequest(ResultMixin):
    """Answer `workspace`'s validation rows with each of `models` over `target`, and score them."""

    workspace: str
    models: tuple[str, ...]
    target: Target
    rows: int | None = None
    concurrency: int = 8
    max_tokens: int | None = None
    yes: bool = False  # consent to a cloud evaluation's paid calls (the core asks for it again)

    def to_payload(self) -> dict[str, Any]:
        return {
            "view": "eval",
            "workspace": self.workspace,
            "models": list(self.models),
            "target": self.target.kind,
            "base_url": self.target.base_url,
            "rows": self.rows,
        }

    def __str__(self) -> str:
        return f"eval of {', '.join(self.models)} on {self.workspace}"


@dataclass(frozen=True)
class ProbeRequest(ResultMixin):
    """Probe `workspace`'s teacher against its student on its reward over `target` (`opd probe`)."""

    workspace: str
    target: Target
    prompts: int = 32
    samples: int = 4
    seed: int = 0
    budget: str | None = None
    price: float | None = None
    yes: bool = False  # consent to a cloud probe's paid calls (the core asks for it again)
    config: str = "config.yaml"  # the job YAML inside the workspace (`-c/--config`)

    def to_payload(self) -> dict[str, Any]:
        return {
            "view": "probe",
            "workspace": self.workspace,
            "config": self.config,
            "target": self.target.kind,
            "base_url": self.target.base_url,
            "prompts": self.prompts,
            "samples": self.samples,
            "seed": self.seed,
            "budget": self.budget,
        }

    def __str__(self) -> str:
        return f"probe of {self.workspace}"
