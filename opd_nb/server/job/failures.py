"""Recording that a job FAILED, and why, in one place: the worker (its engine raised) and the job
manager (its worker died without a word) both write a failure through :func:`fail_job`.

A full disk is named as the reason whoever notices it (:mod:`opd_nb.server.disk_space`): the
reserve file is deleted first, so there is room to write that reason.
"""

from __future__ import annotations

from pathlib import Path

from opd_nb.constants import FAILED, RUNNING
from opd_nb.server.disk_space import (
    full_disk_reason,
    is_disk_full,
    low_space,
    mentions_full_disk,
    release_reserve,
)
from opd_nb.server.store import Store
from opd_nb.server.store.db import now_text


def full_disk_failure(data_dir: Path, evidence: list[str], exc: BaseException | None = None) -> str | None:
    """The full-disk reason when the disk is (nearly) full or ``evidence``/``exc`` says it was, else None.

    Frees the reserve when it answers: the caller is about to record the failure."""
    if not ((exc is not None and is_disk_full(exc)) or mentions_full_disk(evidence) or low_space(data_dir)):
        return None
    release_reserve(data_dir)
    return full_disk_reason(data_dir)


def fail_job(store: Store, job_id: str, code: str, message: str, log_lines: list[str]) -> bool:
    """Log ``log_lines`` (ending with the cause: the docs say to read a failed job's log from its end) and
    mark the job FAILED with ``code`` and ``message``.

    Only a RUNNING job changes: one that a cancel or another writer already settled keeps its end."""
    store.add_log(job_id, *log_lines)
    return store.set_job(
        job_id,
        only_if_status=(RUNNING,),
        status=FAILED,
        code=code,
        message=message,
        end_time=now_text(),
        worker_pid=None,
    )
