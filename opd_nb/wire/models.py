"""Local-only: which models this machine runs, and what a model id resolves to."""

from __future__ import annotations

from typing import Literal

from opd_nb.wire.base import Wire, absent_when_none

ModelKind = Literal["stand-in", "mapped", "checkpoint", "path"]


class LocalModel(Wire):
    """One model the local engine can run: a bundled stand-in (for which cloud ids), a ``--model-map``
    entry, or a finished job's published checkpoint."""

    model_id: str
    kind: str  # a ModelKind (read as text: a newer server may list a kind this client does not know)
    path: str
    role: str | None = absent_when_none()
    stands_in_for: str | None = absent_when_none()
    job_id: str | None = absent_when_none()


class ModelListing(Wire):
    models: list[LocalModel] = []
    default_student: str | None = None
    default_teacher: str | None = None


class ResolvedModel(Wire):
    """What a model id runs on here (``note``: one line for the job log when it is a substitution)."""

    model_id: str
    kind: ModelKind
    path: str
    note: str = ""
    job_id: str | None = None  # the local job a fine-tuned output comes from
