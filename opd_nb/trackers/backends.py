"""The tracker backends, one interface: which exist, which extra installs each, and how one is opened.

Each backend lives in a module of its own and imports its library only when it is opened, so `opd`,
`%load_ext opd_nb` and a watch without `--report-to` never pay for trackio, wandb, tensorboard or
mlflow. A backend whose library is missing is a one-line error that names the extra to install.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from typing import Any, Protocol

from opd_nb.errors import OpdError
from opd_nb.health.rules import HealthAlert
from opd_nb.trackers.records import RunInfo

# name -> (module of its Backend, the library it needs, the pip extra that installs it)
BACKENDS: dict[str, tuple[str, str, str]] = {
    "trackio": ("opd_nb.trackers.trackio_run", "trackio", "trackio"),
    "wandb": ("opd_nb.trackers.wandb_run", "wandb", "wandb"),
    "tensorboard": ("opd_nb.trackers.tensorboard_run", "tensorboard", "tensorboard"),
    "mlflow": ("opd_nb.trackers.mlflow_run", "mlflow", "mlflow"),
}
SAMPLE_COLUMNS = ("kind", "step", "group", "sample", "prompt", "completion", "reward", "length", "truncated",
                  "mean_log_ratio", "reward_status", "reward_error")  # fmt: skip


class Backend(Protocol):
    """One tracker run. Steps are global (a continued job's steps go on from its parent's)."""

    name: str

    def start(self, run: RunInfo) -> None: ...

    def log_metrics(self, step: int, values: dict[str, float]) -> None: ...

    def log_samples(self, step: int, rows: Sequence[Sequence[Any]]) -> None:
        """One step's rollout samples, a row per sample in the order of SAMPLE_COLUMNS."""

    def log_alert(self, step: int | None, alert: HealthAlert) -> None: ...

    def finish(self, status: str, summary: dict[str, Any]) -> None: ...

    def where(self) -> str:
        """One line: where the run was written and how to look at it (or upload it)."""
        ...


def parse_report_to(text: str | Sequence[str] | None) -> list[str]:
    """`trackio,wandb` (or a list) as backend names, in order, each once; an unknown name is an error."""
    if text is None:
        return []
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in str(t).split(",")]
    names = list(dict.fromkeys(p.strip().lower() for p in items if p.strip()))
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise OpdError(
            f"unknown tracker {unknown[0]!r}",
            where="--report-to",
            fix=f"use one or more of {','.join(BACKENDS)}, comma-separated",
        )
    return names


def missing_extra(name: str) -> OpdError:
    _, library, extra = BACKENDS[name]
    return OpdError(
        f"reporting to {name} needs the {library} package, which is not installed",
        fix=f"pip install 'opd-nb[{extra}]' (or opd-nb[trackers] for all four)",
    )


def require(name: str) -> None:
    """Refuse at once (before a watch starts) a tracker whose library is not installed."""
    if importlib.util.find_spec(BACKENDS[name][1]) is None:
        raise missing_extra(name)


def open_backend(name: str) -> Backend:
    """A fresh, unstarted backend of `name` (its library imported now; missing: one line naming the extra)."""
    require(name)
    return importlib.import_module(BACKENDS[name][0]).Run()
