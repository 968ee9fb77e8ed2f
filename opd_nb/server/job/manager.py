"""The job queue: PENDING jobs run one at a time (by default) in worker subprocesses.

A worker is ``python -m opd_nb.server.worker DATA_DIR JOB_ID``, started in its own session (a
terminal's Ctrl-C reaches the server, not the job) with the job's process-tree tag
(:mod:`opd_nb.server.process_tree`), which its function servers inherit. It writes logs, metrics,
progress and the final state into the shared store itself; this manager starts workers, asks them
to stop on cancel, ends the job's whole process tree whenever a worker is done, and settles jobs
whose worker died without a word.

Interruptions (documented choice): a job that was RUNNING when the control plane stopped, by
SIGKILL or by SIGTERM/SIGINT alike, resumes at the next start from its last checkpoint
(:mod:`opd_nb.server.resume`), or from step 0 if it saved none, and its log says so. A job
interrupted ``max_interruptions`` times (default 3) fails with the reason instead; ``opd serve
--no-resume`` fails it at once (``ServerRestarted``), as before. A stop is never a user cancel. A
worker that dies while the server runs fails its job (``WorkerCrashed``) with the exit reason and
the last checkpoint, which a new job can continue from by passing its path as ``model``.

Who writes a killed server's job last: never its old worker. A worker whose server is gone writes
no final state (``worker._orphaned``): its function servers die with the server, so its step fails
*because* of the kill, and a FAILED written then would beat (or follow) the next server's resume.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from opd_nb import settings
from opd_nb.constants import CANCELED, PENDING, RUNNING, TERMINAL_STATUSES, UNKNOWN
from opd_nb.server import process_tree
from opd_nb.server.disk_space import ensure_reserve
from opd_nb.server.job.endings import JobEndings
from opd_nb.server.launcher import ChildProcess, Launcher
from opd_nb.server.records import MAX_INTERRUPTIONS
from opd_nb.server.resume import continue_hint, latest_checkpoint, output_dir, rewind
from opd_nb.server.store import Store
from opd_nb.server.store.db import now_text
from opd_nb.server.store.job_record import JobRecord, cancel_message

CANCEL_GRACE_S = 4.0
WORKER_MARKER = "opd_nb.server.worker"


class JobManager(JobEndings):
    def __init__(
        self,
        store: Store,
        data_dir: Path,
        launcher: Launcher,
        *,
        max_running: int = 1,
        poll_s: float = 0.25,
        resume: bool = True,
        max_interruptions: int = MAX_INTERRUPTIONS,
        worker_env: Callable[[str], dict[str, str]] | None = None,
    ):
        self.store = store
        self.data_dir = data_dir
        self.launcher = launcher
        self.max_running = max_running
        self.poll_s = poll_s
        self.resume = resume
        self.max_interruptions = max(1, max_interruptions)
        self.worker_env = worker_env  # per job: what its worker passes its function servers (tracing)
        self._procs: dict[str, ChildProcess] = {}
        self._cancel_at: dict[str, float] = {}
        self._resume: list[str] = []  # RUNNING jobs to start again (oldest first), before any PENDING
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle ----------------------------------------------------------------------------
    def recover(self) -> None:
        """Settle what an earlier run left: resume (or fail) RUNNING jobs, finish asked-for cancels."""
        for job in self.store.jobs_with_status(RUNNING):
            self._recover_running(job)
        for job in self.store.jobs_with_status(PENDING):
            if job.cancel_requested:
                self._finish_canceled(job.job_id)

    def _recover_running(self, job: JobRecord) -> None:
        job_id = job.job_id
        ended = process_tree.end(self.data_dir, process_tree.job_owner(job_id))
        note = f" (ended {ended} leftover process(es) of it)" if ended else ""
        if job.cancel_requested:
            self._finish_canceled(job_id, running=True)
            return
        n = job.meta.resume.interruptions + 1
        self.store.update_meta(job_id, lambda meta: meta.with_resume(interruptions=n))
        if not self.resume:
            hint = continue_hint(latest_checkpoint(output_dir(self.data_dir, job_id)))
            reason = (
                "the local control plane stopped while this job was running (server restart) and "
                f"`opd serve --no-resume` does not resume jobs. {hint}"
            )
            self._fail(job_id, "ServerRestarted", reason, note)
            return
        if n >= self.max_interruptions:
            hint = continue_hint(latest_checkpoint(output_dir(self.data_dir, job_id)))
            reason = (
                f"the job was interrupted {n} time{'s' if n != 1 else ''} (the local control plane "
                "stopped while it ran); "
                f"it is not resumed again after {self.max_interruptions}. {hint}"
            )
            self._fail(job_id, "TooManyInterruptions", reason, note)
            return
        point = rewind(self.store, self.data_dir, job)
        where = f"resumes from {point.name}" if point.path else "restarts from step 0 (no checkpoint)"
        self.store.add_log(
            job_id,
            f"[server] {now_text()} interrupted by a server restart ({n} of {self.max_interruptions - 1} "
            f"allowed); the job {where}; metrics past step {point.step} were dropped{note}",
        )
        self._resume.append(job_id)

    def start(self) -> None:
        ensure_reserve(self.data_dir)
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="opd-job-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop scheduling; running jobs are interrupted (resumed at the next start) and their trees ended."""
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
                    pass
            self._end_tree(job_id, proc)
            self._settle(job_id, proc, shutting_down=True)

    def wake(self) -> None:
        self._wake.set()

    # ---- operations ---------------------------------------------------------------------------
    def cancel(self, job_id: str, reason: str | None = None) -> str:
        """Ask a job to stop; returns the status right after the request. ``reason`` (who and why) is kept
        for the job's message and log; the first request's reason stays."""
        job = self.store.job(job_id)
        if job is None or job.status in TERMINAL_STATUSES:
            return job.status if job else UNKNOWN
        if reason and not job.cancel_requested:  # before the flag: the worker reads both when it stops
            self.store.update_meta(job_id, lambda meta: meta.model_copy(update={"cancel_reason": reason}))
        self.store.set_job(job_id, cancel_requested=1)
        why = f": {reason}" if reason else ""
        if job.status == RUNNING and not self._has_worker(job_id):
            return self._cancel_without_worker(job_id, why)
        if job.status == PENDING and self.store.set_job(
            job_id,
            only_if_status=(PENDING,),
            status=CANCELED,
            end_time=now_text(),
            message=cancel_message(reason or job.meta.cancel_reason),
        ):
            self.store.add_log(job_id, f"[server] {now_text()} job canceled before it started{why}")
            return CANCELED
        self.store.add_log(job_id, f"[server] {now_text()} cancel requested{why}; stopping the worker")
        self._cancel_at.setdefault(job_id, time.monotonic())
        self._wake.set()
        return self._status(job_id)

    def _status(self, job_id: str) -> str:
        job = self.store.job(job_id)
        return job.status if job else UNKNOWN

    def _has_worker(self, job_id: str) -> bool:
        proc = self._procs.get(job_id)
        return proc is not None and proc.poll() is None

    def _cancel_without_worker(self, job_id: str, why: str) -> str:
        """A RUNNING job with no live worker (it died unsettled, or waits to resume): canceled now."""
        with contextlib.suppress(ValueError):
            self._resume.remove(job_id)
        process_tree.end(self.data_dir, process_tree.job_owner(job_id), grace_s=1.0)
        self.store.add_log(
            job_id, f"[server] {now_text()} cancel requested{why}; the job has no running worker"
        )
        self._finish_canceled(job_id, running=True)
        return self._status(job_id)

    # ---- scheduler loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as exc:  # keep scheduling even if one tick hits a transient DB error
                with contextlib.suppress(OSError):  # a full disk: even this line may not be written
                    print(f"opd serve: scheduler error: {exc!r}", file=sys.stderr)
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def _tick(self) -> None:
        for job_id, proc in list(self._procs.items()):
            if proc.poll() is not None:
                self._end_tree(job_id, proc)
                self._settle(job_id, proc)
                continue
            asked = self._cancel_at.get(job_id)
            if asked is None:
                job = self.store.job(job_id)
                if job is None or job.cancel_requested:
                    asked = self._cancel_at.setdefault(job_id, time.monotonic())
            if asked is not None and time.monotonic() - asked > CANCEL_GRACE_S:
                self._end_tree(job_id, proc)
                self._settle(job_id, proc)
        while self._resume and len(self._procs) < self.max_running and not self._stop.is_set():
            self._launch(self._resume.pop(0), resuming=True)
        if len(self._procs) >= self.max_running or self._stop.is_set():
            return
        for job in self.store.jobs_with_status(PENDING):
            if len(self._procs) >= self.max_running:
                break
            if job.cancel_requested:
                self._finish_canceled(job.job_id)
                continue
            self._launch(job.job_id)

    def _launch(self, job_id: str, *, resuming: bool = False) -> None:
        job_dir = self.data_dir / "jobs" / job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        job = self.store.job(job_id) if resuming else None
        if resuming:
            if job is None or job.status != RUNNING:
                return
        elif not self.store.set_job(job_id, only_if_status=(PENDING,), status=RUNNING, start_time=now_text()):
            return
        env = process_tree.child_env(self.data_dir, process_tree.job_owner(job_id))
        env[settings.SERVER_PID.name] = str(os.getpid())  # the worker exits when this process is gone
        env.update(self.worker_env(job_id) if self.worker_env else {})
        # The scheduler's own thread: it may wait for the fork server's first import (a fresh
        # process would spend the same time importing).
        proc = self.launcher.start(
            WORKER_MARKER, [str(self.data_dir), job_id], env=env, log=job_dir / "worker.log", wait_s=120.0
        )
        self._procs[job_id] = proc
        self.store.set_job(job_id, worker_pid=proc.pid)
        if job is not None:  # resuming
            point = job.meta.resume.resume_from
            what = f"resumed from {Path(point).name}" if point else "restarted from step 0"
            self.store.add_log(
                job_id, f"[server] {now_text()} {what} after a server restart (worker pid {proc.pid})"
            )
        else:
            self.store.add_log(job_id, f"[server] {now_text()} job started (worker pid {proc.pid})")

    def _end_tree(self, job_id: str, proc: ChildProcess) -> None:
        """No process of a finished (or stopping) job may remain: its worker, function servers, anything."""
        process_tree.end(self.data_dir, process_tree.job_owner(job_id), grace_s=1.0)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _settle(self, job_id: str, proc: ChildProcess, *, shutting_down: bool = False) -> None:
        """The worker is gone: if it did not record a final state, record one for it.

        The worker is forgotten only once that is recorded: a write that fails (a full disk) is tried
        again on the next tick, so the job cannot stay RUNNING with nobody watching it."""
        job = self.store.job(job_id)
        if job is not None and job.status == RUNNING:
            self._record_end(job, proc, self._cancel_at.get(job_id), shutting_down)
        self._procs.pop(job_id, None)
        self._cancel_at.pop(job_id, None)
        ensure_reserve(self.data_dir)
