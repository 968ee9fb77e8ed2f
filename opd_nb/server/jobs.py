"""The job queue: PENDING jobs run one at a time (by default) in worker subprocesses.

A worker is ``python -m opd_nb.server.worker DATA_DIR JOB_ID``. It writes logs, metrics, progress
and the final state into the shared store itself; this manager only starts workers, asks them to
stop on cancel (and kills them if they do not), and settles jobs whose worker died without a word.

Restart semantics (documented choice): a job that was RUNNING when the control plane died is
marked FAILED on the next start, with the reason and its last checkpoint in its log; the published
checkpoints stay listed so a new job can continue from them (``model: opd-local/...`` needs a
SUCCEEDED job, so pass the checkpoint path as ``model`` instead). PENDING jobs simply run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from opd_nb.constants import CANCELED, FAILED, PENDING, RUNNING, TERMINAL_STATUSES
from opd_nb.server.function_registry import kill_if_ours
from opd_nb.server.store import Store, now_text

CANCEL_GRACE_S = 4.0
WORKER_MARKER = "opd_nb.server.worker"


class JobManager:
    def __init__(self, store: Store, data_dir: Path, *, max_running: int = 1, poll_s: float = 0.25):
        self.store = store
        self.data_dir = data_dir
        self.max_running = max_running
        self.poll_s = poll_s
        self._procs: dict[str, subprocess.Popen] = {}
        self._cancel_at: dict[str, float] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle ----------------------------------------------------------------------------
    def recover(self) -> None:
        """Settle jobs left RUNNING by a control plane that died (see the module docstring)."""
        for job in self.store.jobs_with_status(RUNNING):
            killed = kill_if_ours(job.get("worker_pid"), WORKER_MARKER)
            last = self.store.checkpoints(job["job_id"])
            hint = f" Its last checkpoint is {last[-1]['path']}." if last else " It saved no checkpoint."
            reason = (
                "the local control plane stopped while this job was running (server restart); "
                "local jobs do not resume." + hint + " Submit it again to retrain."
            )
            self.store.add_log(
                job["job_id"],
                f"[server] {now_text()} FAILED: {reason}"
                + (" (its orphaned worker was stopped)" if killed else ""),
            )
            self.store.set_job(
                job["job_id"],
                only_if_status=(RUNNING,),
                status=FAILED,
                code="ServerRestarted",
                message=reason,
                end_time=now_text(),
                worker_pid=None,
            )
        # A cancel that was asked for but never carried out on a pending job.
        for job in self.store.jobs_with_status(PENDING):
            if job.get("cancel_requested"):
                self._finish_canceled(job["job_id"])

    def start(self) -> None:
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="opd-job-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop scheduling; running workers are stopped and their jobs marked FAILED (clean shutdown)."""
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(5)
        for job_id, proc in list(self._procs.items()):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(CANCEL_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            self._settle(job_id, proc, shutting_down=True)

    def wake(self) -> None:
        self._wake.set()

    # ---- operations ---------------------------------------------------------------------------
    def cancel(self, job_id: str) -> str:
        """Ask a job to stop; returns the status right after the request."""
        job = self.store.job(job_id)
        if job is None or job["status"] in TERMINAL_STATUSES:
            return job["status"] if job else "UNKNOWN"
        self.store.set_job(job_id, cancel_requested=1)
        if job["status"] == PENDING and self.store.set_job(
            job_id,
            only_if_status=(PENDING,),
            status=CANCELED,
            end_time=now_text(),
            message="canceled by user",
        ):
            self.store.add_log(job_id, f"[server] {now_text()} job canceled before it started")
            return CANCELED
        self.store.add_log(job_id, f"[server] {now_text()} cancel requested; stopping the worker")
        self._cancel_at.setdefault(job_id, time.monotonic())
        self._wake.set()
        return self.store.job(job_id)["status"]

    # ---- scheduler loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as exc:  # keep scheduling even if one tick hits a transient DB error
                print(f"opd serve: scheduler error: {exc!r}", file=sys.stderr)
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def _tick(self) -> None:
        for job_id, proc in list(self._procs.items()):
            if proc.poll() is not None:
                self._settle(job_id, proc)
                continue
            asked = self._cancel_at.get(job_id)
            if asked is None:
                job = self.store.job(job_id)
                if job is None or job.get("cancel_requested"):
                    asked = self._cancel_at.setdefault(job_id, time.monotonic())
            if asked is not None and time.monotonic() - asked > CANCEL_GRACE_S:
                proc.kill()
                proc.wait(5)
                self._settle(job_id, proc)
        if len(self._procs) >= self.max_running or self._stop.is_set():
            return
        for job in self.store.jobs_with_status(PENDING):
            if len(self._procs) >= self.max_running:
                break
            if job.get("cancel_requested"):
                self._finish_canceled(job["job_id"])
                continue
            self._launch(job["job_id"])

    def _launch(self, job_id: str) -> None:
        job_dir = self.data_dir / "jobs" / job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        if not self.store.set_job(job_id, only_if_status=(PENDING,), status=RUNNING, start_time=now_text()):
            return
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(job_dir / "worker.log", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", WORKER_MARKER, str(self.data_dir), job_id],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self._procs[job_id] = proc
        self.store.set_job(job_id, worker_pid=proc.pid)
        self.store.add_log(job_id, f"[server] {now_text()} job started (worker pid {proc.pid})")

    def _settle(self, job_id: str, proc: subprocess.Popen, *, shutting_down: bool = False) -> None:
        """The worker is gone: if it did not record a final state, record one for it."""
        self._procs.pop(job_id, None)
        asked = self._cancel_at.pop(job_id, None)
        job = self.store.job(job_id)
        if job is None or job["status"] != RUNNING:
            return
        if asked is not None or job.get("cancel_requested"):
            self._finish_canceled(job_id, running=True)
            return
        if shutting_down:
            reason = (
                "the local control plane was stopped while this job was running; local jobs do not resume"
            )
            code = "ServerStopped"
        else:
            reason = f"the job worker exited unexpectedly (exit code {proc.returncode})"
            code = "WorkerCrashed"
        tail = _tail(self.data_dir / "jobs" / job_id / "worker.log", 20)
        self.store.add_log(
            job_id, f"[server] {now_text()} FAILED: {reason}", *[f"[worker] {t}" for t in tail]
        )
        self.store.set_job(
            job_id,
            only_if_status=(RUNNING,),
            status=FAILED,
            code=code,
            message=reason,
            end_time=now_text(),
            worker_pid=None,
        )

    def _finish_canceled(self, job_id: str, running: bool = False) -> None:
        statuses = (RUNNING, PENDING) if running else (PENDING,)
        if self.store.set_job(
            job_id,
            only_if_status=statuses,
            status=CANCELED,
            end_time=now_text(),
            message="canceled by user",
            worker_pid=None,
        ):
            self.store.add_log(job_id, f"[server] {now_text()} job {CANCELED}")


def _tail(path: Path, n: int) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return lines[-n:]
