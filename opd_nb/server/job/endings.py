"""How a job's end is recorded when its worker did not record it: canceled, interrupted, or failed with why.

Split from :mod:`opd_nb.server.job.manager` (the scheduler) as a mixin: the manager decides *when* a worker is
gone, this decides *what* the job's record then says, a full disk included (:mod:`disk_space`).
"""

from __future__ import annotations

from pathlib import Path

from opd_nb.constants import CANCELED, PENDING, RUNNING
from opd_nb.server.disk_space import DISK_FULL
from opd_nb.server.job.failures import fail_job, full_disk_failure
from opd_nb.server.launcher import ChildProcess
from opd_nb.server.resume import continue_hint, latest_checkpoint, output_dir
from opd_nb.server.store import Store
from opd_nb.server.store.db import now_text
from opd_nb.server.store.job_record import JobRecord, cancel_message
from opd_nb.server.worker_exits import exit_reason


class JobEndings:
    """The job manager's records of a job's end (needs ``store``, ``data_dir`` and ``resume``)."""

    store: Store
    data_dir: Path
    resume: bool

    def _record_end(
        self, job: JobRecord, proc: ChildProcess, asked: float | None, shutting_down: bool
    ) -> None:
        job_id = job.job_id
        if asked is not None or job.cancel_requested:
            self._finish_canceled(job_id, running=True)
            return
        point = latest_checkpoint(output_dir(self.data_dir, job_id))
        if shutting_down and self.resume:
            where = f"from {point.name}" if point.path else "from step 0 (no checkpoint yet)"
            self.store.add_log(
                job_id,
                f"[server] {now_text()} interrupted: the local control plane stopped while this job was "
                f"running; it resumes {where} when `opd serve` starts again on this data dir",
            )
            return  # stays RUNNING: the next start resumes it
        tail = [f"[worker] {t}" for t in _tail(self.data_dir / "jobs" / job_id / "worker.log", 20)]
        if shutting_down:
            reason = (
                "the local control plane was stopped while this job was running and `opd serve "
                f"--no-resume` does not resume jobs. {continue_hint(point)}"
            )
            self._fail(job_id, "ServerStopped", reason, "", tail)
            return
        full = full_disk_failure(self.data_dir, tail)
        if full is not None:
            reason = f"the job worker died on a full disk ({exit_reason(proc.returncode)}): {full}"
            self._fail(job_id, DISK_FULL, reason, "", tail)
            return
        reason = f"the job worker died ({exit_reason(proc.returncode)}). {continue_hint(point)}"
        self._fail(job_id, "WorkerCrashed", reason, "", tail)

    def _fail(self, job_id: str, code: str, reason: str, note: str, extra: list[str] | None = None) -> None:
        fail_job(
            self.store,
            job_id,
            code,
            reason,
            [
                *(extra or []),
                f"[server] {now_text()} FAILED: {reason}{note}",
            ],  # the cause last, where users read
        )

    def _finish_canceled(self, job_id: str, running: bool = False) -> None:
        statuses = (RUNNING, PENDING) if running else (PENDING,)
        reason = job.meta.cancel_reason if (job := self.store.job(job_id)) is not None else None
        if self.store.set_job(
            job_id,
            only_if_status=statuses,
            status=CANCELED,
            end_time=now_text(),
            message=cancel_message(reason),
            worker_pid=None,
        ):
            self.store.add_log(
                job_id, f"[server] {now_text()} job {CANCELED}" + (f": {reason}" if reason else "")
            )


def _tail(path: Path, n: int) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return lines[-n:]
