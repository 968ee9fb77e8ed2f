"""`opd checkpoints JOB`: a job's checkpoints with their metrics, the best one, expiry and export names
(the deploy name, and the display name an export was given).

Why a module of its own: the CLI and the notebook monitor show the same table, and the facts come
from three places (the checkpoint list, the metric rows, the docs' best-checkpoint rule in
:mod:`opd_nb.health.rules`). Bailian deletes a checkpoint at its ``expire_time`` (about 15 days after it
was saved) and may auto-export only the best one, so the table says how long each one has left and
the line that exports it.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from opd_nb.constants import LOSS, REWARD_MEAN
from opd_nb.health.rules import pick_checkpoint
from opd_nb.results import ResultMixin
from opd_nb.views import render

# "deploy name": the model_name an export gives (what `opd deploy` takes); "display name": the label the
# export was given with --model-name (Bailian's model_display_name), which nothing deploys by.
HEADERS = (
    "checkpoint",
    "step",
    "status",
    "reward mean@1",
    "loss",
    "best",
    "expires",
    "deploy name",
    "display name",
)


class CheckpointRow(BaseModel):
    checkpoint: str
    checkpoint_id: str | None
    step: int | None
    status: str | None
    create_time: str | None
    expire_time: str | None
    expires_in_days: float | None  # negative: expired
    model_name: str | None  # the exported name (what to deploy); None until exported
    display_name: str | None  # the label `opd export --model-name` gave it (not deployable); None if none
    best: bool
    score: float | None = None  # the rule's metric measured at its own step (None: unscored or no metrics)
    unscored: bool = False  # nothing measured at its step: never the best, never a neighbour's score
    metrics: dict[str, Any]


class CheckpointTable(ResultMixin, BaseModel):
    """JSON: ``{"job_id", "best_reason", "export_hint", "checkpoints": [CheckpointRow...]}``, newest first."""

    job_id: str
    checkpoints: list[CheckpointRow]
    best_reason: str | None = None  # why the marked one is best, or why none is (None: no metrics)
    export_hint: str = ""

    def _rows(self) -> list[tuple[str, ...]]:
        return [
            (
                c.checkpoint,
                str(c.step if c.step is not None else "-"),
                c.status or "-",
                render.fmt(c.metrics.get(REWARD_MEAN)),
                render.fmt(c.metrics.get(LOSS)),
                "best" if c.best else "unscored" if c.unscored else "",
                expires_text(c.expires_in_days),
                c.model_name or "-",
                c.display_name or "-",
            )
            for c in self.checkpoints
        ]

    def __str__(self) -> str:
        if not self.checkpoints:
            return f"{self.job_id}: no checkpoints kept"
        rows = [HEADERS, *self._rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        if self.best_reason:
            lines.append(f"best: {self.best_reason}")
        return "\n".join([*lines, self.export_hint])

    def _repr_html_(self) -> str:
        body = render.table(list(HEADERS), self._rows())
        note = f"<div>best: {render.esc(self.best_reason)}</div>" if self.best_reason else ""
        return f"<b>checkpoints of {render.esc(self.job_id)}</b>{body}{note}<div>{render.esc(self.export_hint)}</div>"


def expires_text(days: float | None) -> str:
    """'expires in 14 days', 'expires in 5 h', 'expired' (a checkpoint the cloud has deleted)."""
    if days is None:
        return "-"
    if days <= 0:
        return "expired"
    return f"expires in {int(days)} days" if days >= 1 else f"expires in {max(1, round(days * 24))} h"


def export_hint(job_id: str, best: str | None = None) -> str:
    """The export line; it names the best checkpoint when the docs' rule found one, and which name to deploy."""
    line = (
        f"export one to deploy it: opd export {job_id} CHECKPOINT [--model-name LABEL]; "
        "deploy by its deploy name (`opd deploy NAME`), not by its display name"
    )
    return f"{line} (the docs' rule picks {best})" if best else line


def checkpoint_table(
    job_id: str, checkpoints: list[Any], metrics: list[dict] | None, now: float | None = None
) -> CheckpointTable:
    """The table from a client's checkpoints and metric rows (None: the plane reports no metrics)."""
    now = time.time() if now is None else now
    pick = pick_checkpoint(checkpoints, metrics) if checkpoints and metrics else None
    best = pick.best if pick is not None else None
    scores = pick.scores if pick is not None else {}
    rows = [
        CheckpointRow(
            checkpoint=c.name,
            checkpoint_id=c.checkpoint_id,
            step=c.step,
            status=c.status,
            create_time=c.created_at,
            expire_time=c.expire_time,
            expires_in_days=_rounded(c.expires_in_days(now)),
            model_name=c.model_name,
            display_name=c.display_name if c.display_name != c.model_name else None,
            best=best is not None and best.checkpoint is c,
            score=scores.get(c.name),
            unscored=c.name in scores and scores[c.name] is None,
            metrics=c.metrics,
        )
        for c in checkpoints
    ]
    return CheckpointTable(
        job_id=job_id,
        checkpoints=rows,
        best_reason=(best.reason if best else pick.note) if pick is not None else None,
        export_hint=export_hint(job_id, best.checkpoint.name if best else None),
    )


def _rounded(days: float | None) -> float | None:
    return None if days is None else round(days, 2)
