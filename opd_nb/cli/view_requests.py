"""Typed "open this view" results: what a command returns under ``%opd`` when the answer is a widget.

The CLI never imports the notebook layer (the notebook imports the CLI, for its parser), so a
command cannot build a widget itself. Under the magic it returns one of these requests instead,
and ``opd_nb.notebook.views`` turns each into its widget, branching on the type. In a terminal the
same commands either do the work themselves (``opd watch``) or say that they need a notebook.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opd_nb.results import ResultMixin

if TYPE_CHECKING:  # the client imports httpx: not at parser-build time
    from opd_nb.client import SubmitResult, Target


@dataclass(frozen=True)
class WatchRequest(ResultMixin):
    """Open the job monitor on `job_ids` over `target` (after `submitted`, for `%opd submit`)."""

    job_ids: tuple[str, ...]
    target: Target
    submitted: SubmitResult | None = None

    def to_payload(self) -> dict[str, Any]:
        return {
            "view": "monitor",
            "job_ids": list(self.job_ids),
            "target": self.target.kind,
            "base_url": self.target.base_url,
            "submitted": self.submitted.to_payload() if self.submitted is not None else None,
        }

    def __str__(self) -> str:
        return f"watch {', '.join(self.job_ids)} on {self.target.kind} {self.target.base_url}"


@dataclass(frozen=True)
class FormRequest(ResultMixin):
    """Open the config form over `config` in `workspace`, checked against `target`'s rules."""

    workspace: str
    config: str = "config.yaml"
    target: str | None = None  # None: the target the kernel points at (`%opd use`)

    def __str__(self) -> str:
        return f"config form for {self.workspace}/{self.config}"


@dataclass(frozen=True)
class PlaygroundRequest(ResultMixin):
    """Open the reward playground for `workspace` (scoring with `processor_class`, or its own)."""

    workspace: str
    processor_class: str | None = None
    concurrency: int = 8

    def __str__(self) -> str:
        return f"reward playground for {self.workspace}"


@dataclass(frozen=True)
class ConfigCellRequest(ResultMixin):
    """Check the ``%%opd config`` cell's YAML `body`; write it to `path` only if it has no errors."""

    body: str = field(repr=False)
    path: str = "."
    target: str | None = None  # None: the target the kernel points at (`%opd use`)

    def __str__(self) -> str:
        return f"check the cell's YAML and write it to {self.path} if clean"
