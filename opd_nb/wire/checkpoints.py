"""A job's checkpoints, in Bailian's "list checkpoints" shape (local extras under ``local``)."""

from __future__ import annotations

from opd_nb.wire.base import Scalar, Wire


class CheckpointLocal(Wire):
    """The local control plane's extras: where the checkpoint is on disk (deployable by this path), the
    metrics of its step, and whether it is the job's published ``finetuned_output``."""

    path: str
    metrics: dict[str, Scalar] = {}
    published: bool = False


class CheckpointEntry(Wire):
    """One kept checkpoint, newest step first in a listing. ``model_name`` is the name to deploy, once
    exported (``model_display_name``: the label the export was given)."""

    checkpoint_id: str | None = (
        None  # ``{job_id}:checkpoint-{step}`` (the published copy: ``{job_id}:final``)
    )
    checkpoint: str | None = None
    full_name: str | None = None
    job_id: str | None = None
    step: int | None = None
    status: str | None = None  # SUCCEEDED, or EXPIRED past expire_time
    create_time: str | None = None
    expire_time: str | None = None
    model_name: str | None = None
    model_display_name: str | None = None
    local: CheckpointLocal | None = None


class ExportLocal(Wire):
    checkpoint: CheckpointEntry  # the exported checkpoint's entry, as the listing shows it after


class ExportAnswer(Wire):
    """Bailian's export answer is ``output: true``; locally the exported entry comes along under ``local``."""

    request_id: str
    output: bool
    local: ExportLocal | None = None
