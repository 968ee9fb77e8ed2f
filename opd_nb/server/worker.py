"""Job worker subprocess: ``python -m opd_nb.server.worker DATA_DIR JOB_ID``.

Runs one job with the local OPD engine. It starts the job's function servers, builds the
:class:`~opd_nb.engine.api.EngineJob`, and writes everything the engine reports (logs, progress,
metrics, checkpoints, the final state) straight into the shared SQLite store. Running in its own
process means a crash in training or in user code never takes the control plane down.

SIGTERM/SIGINT is an interruption, not a cancel: the engine stops at its next step, nothing is
published, the job stays RUNNING and the worker exits with ``EXIT_INTERRUPTED``; the control plane
resumes it from its last checkpoint at its next start. Only the store's cancel flag cancels.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from opd_nb import settings
from opd_nb.constants import CANCELED, FAILED, RUNNING, SUCCEEDED
from opd_nb.engine.api import EngineError, EngineJob, RewardEndpoint, RolloutEndpoint
from opd_nb.errors import OpdError
from opd_nb.functions.log_cap import keep_own_log_under
from opd_nb.server.disk_space import DISK_FULL
from opd_nb.server.job.failures import fail_job, full_disk_failure
from opd_nb.server.job.function_deaths import (
    DIED_CODE,
    FunctionWatch,
    function_log_lines,
)
from opd_nb.server.store import Store
from opd_nb.server.store.db import now_text
from opd_nb.server.store.job_record import (
    JobFunction,
    JobProgress,
    JobRecord,
    TrainingOutcome,
    cancel_message,
)
from opd_nb.server.tracing.env import function_env
from opd_nb.server.worker_exits import EXIT_INTERRUPTED
from opd_nb.spec.submit_rules import too_few_samples, too_few_samples_fix

_STOP_POLL_S = 0.5
PARENT_ENV = settings.SERVER_PID.name  # the control plane that started this worker
# The parent whose end means the control plane is gone: the fork server, when one stands between
# (it exits with the server); without it the server itself (``PARENT_ENV``).
WATCH_ENV = settings.WATCH_PID.name
FUNCTION_EXIT_S = 1.0  # how long a failed step watches for one of its function servers to exit
RESTART_GRACE_S = 5.0  # a call waits this much past a restart's start-up limit for the restarted server
ORPHAN_SETTLE_S = 2.0  # how long a step failed by a dead function server waits to see if the server died


class Interrupted(Exception):
    """Raised from the engine's stop check after SIGTERM/SIGINT: unwind now, publish nothing."""


class StoreEvents:
    """`EngineEvents` that persist into the store; cheap enough to call every step."""

    def __init__(self, store: Store, job_id: str):
        self.store = store
        self.job_id = job_id
        self._last_progress = 0.0

    def log(self, message: str, level: str = "INFO") -> None:
        self.store.add_log(self.job_id, *self.lines(message, level))

    @staticmethod
    def lines(message: str, level: str = "INFO") -> list[str]:
        """``message`` as the job's log lines: one per line, each with its level and time."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        return [f"[{level}] {stamp} {line}" for line in str(message).splitlines() or [""]]

    def progress(self, step: int, total_steps: int, epoch: int, n_epochs: int, eta_s: float | None) -> None:
        data = JobProgress(
            step=step,
            total_steps=total_steps,
            epoch=epoch,
            n_epochs=n_epochs,
            eta_s=eta_s,
            percent=round(100.0 * step / total_steps, 1) if total_steps else None,
        )
        self.store.set_job(self.job_id, progress=data)
        now = time.monotonic()
        if now - self._last_progress >= 1.0 or step == total_steps:
            self._last_progress = now
            eta = f", eta {eta_s:.0f}s" if eta_s is not None else ""
            self.log(f"progress: step {step}/{total_steps}, epoch {epoch}/{n_epochs}{eta}")

    def metrics(self, row: dict[str, Any]) -> None:
        step = int(row.get("step", 0))
        self.store.add_metrics(self.job_id, step, _jsonable(row))

    def checkpoint(self, step: int, path: str, metrics: dict[str, float]) -> None:
        self.store.add_checkpoint(self.job_id, step, Path(path).name, str(path), _jsonable(metrics))
        self.log(f"checkpoint saved: {Path(path).name} ({path})")


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, float) and value != value:  # NaN is not JSON
            value = None
        out[str(key)] = value
    return out


class StopFlag:
    """`should_stop` for the engine: the cancel flag in the store (polled at most every 0.5 s).

    After a signal it raises :class:`Interrupted` instead of answering: a stopped engine would
    publish its model as if the job were done.
    """

    def __init__(self, store: Store, job_id: str):
        self.store = store
        self.job_id = job_id
        self._last = 0.0
        self._stopped = False
        self.signalled = False

    def __call__(self) -> bool:
        if self.signalled:
            raise Interrupted()
        if self._stopped:
            return True
        now = time.monotonic()
        if now - self._last >= _STOP_POLL_S:
            self._last = now
            self._stopped = self.store.cancel_requested(self.job_id)
        return self._stopped


def _watch_parent(parent: int, data_dir: Path, job_id: str) -> None:
    """If the control plane dies (even by SIGKILL), end our children and exit; the next server resumes the job.

    ``parent`` comes from the environment (``WATCH_ENV`` or ``OPD_SERVER_PID``): a server killed while this worker was
    still importing torch is already gone by the time a thread could ask ``getppid()``. The job's log says
    why the worker stopped whichever noticed first, this watch or a step that failed with the kill.
    """
    while True:
        if os.getppid() != parent:
            _end_children()
            with contextlib.suppress(Exception):  # a log line is all it adds: the exit must happen anyway
                _orphaned_exit(StoreEvents(Store(data_dir), job_id), "its watch saw the server process gone")
            os._exit(3)
        time.sleep(0.5)


def _end_children() -> None:
    """Every process this worker started (function servers, even half-started ones), TERM then KILL."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        try:
            child.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(children, timeout=1.0)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass


def run_job(data_dir: Path, job_id: str) -> int:
    """Run one job to a final state recorded in the store; the exit code is for the job manager's log."""
    store = Store(data_dir)
    job = store.job(job_id)
    if job is None:
        print(f"job {job_id} not found", file=sys.stderr)
        return 2
    _set_torch_threads(torch_threads(with_functions=bool(job.meta.functions)))
    events = StoreEvents(store, job_id)
    should_stop = StopFlag(store, job_id)
    servers: list[Any] = []
    watch = FunctionWatch(
        servers, [], events.log, restart_allowed=lambda: not (should_stop.signalled or _orphaned())
    )

    def on_signal(signum: int, frame: Any) -> None:
        should_stop.signalled = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        result = _train(data_dir, job, events, should_stop, watch)
    except Interrupted:
        return _interrupted(events)
    except Exception as exc:
        watch.stop()
        if should_stop.signalled:
            return _interrupted(events)  # the signal broke a step mid-way
        if _orphaned(ORPHAN_SETTLE_S if _a_function_died(servers) else 0.0):
            return _orphaned_exit(events, f"{type(exc).__name__}: {exc}")
        _stop_servers(servers)
        if store.cancel_requested(job_id):
            _mark_canceled(store, job_id)
            return 0
        _record_failure(store, events, job_id, exc, servers, died=watch.failure(exc))
        return 1
    else:
        watch.stop()
        if _orphaned():
            return _orphaned_exit(events, "it finished training, unpublished")
        _stop_servers(servers)
        if store.cancel_requested(job_id):
            events.log("job stopped on request")
            _mark_canceled(store, job_id)
            return 0
        _publish(store, events, job_id, result)
        return 0
    finally:
        watch.stop()
        _stop_servers(servers)


def _stop_servers(servers: list[Any]) -> None:
    """Stop the job's function servers (again: a no-op). Before the job's end is written: a stopping
    server sends the spans it still holds, and the job's trace token ends with the job (tracing.intake)."""
    for server in servers:
        try:
            server.stop()
        except Exception:
            pass


def _a_function_died(servers: list[Any], wait_s: float = FUNCTION_EXIT_S) -> bool:
    """Whether one of the job's function servers has exited, watching for up to ``wait_s`` seconds.

    A call can see its connection reset a moment before the server's process is seen to exit (the
    reward call fails fast), so a failed step looks a little before it decides nothing died."""
    deadline = time.monotonic() + wait_s
    while servers:
        if any(not s.alive() for s in servers):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return False


def _orphaned(wait_s: float = 0.0) -> bool:
    """Whether the control plane that started this worker is gone (``WATCH_ENV``, else ``PARENT_ENV``,
    is not our parent),
    watching for up to ``wait_s`` seconds.

    Then the job is no longer ours to settle: the next server resumes it. Our function servers are
    being ended by :func:`_watch_parent`, so a training step failing now fails *because* of the kill,
    and writing FAILED would race the next server's resume (and could land after it). A step that
    failed because a function server died waits ``wait_s`` first: a server killed with SIGKILL on a
    loaded machine can take a moment to be gone (to re-parent us), while its children die at once."""
    parent = settings.WATCH_PID.get() or settings.SERVER_PID.get()
    deadline = time.monotonic() + wait_s
    while parent:
        if os.getppid() != parent:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return False


def _orphaned_exit(events: StoreEvents, what: str) -> int:
    events.log(
        f"the control plane that started this worker is gone ({what}); the job stays RUNNING and "
        "resumes from its last checkpoint when `opd serve` starts again",
        level="WARNING",
    )
    return EXIT_INTERRUPTED


def _interrupted(events: StoreEvents) -> int:
    events.log(
        "worker interrupted (SIGTERM/SIGINT): nothing published; if the control plane is stopping, "
        "the job resumes from its last checkpoint when it starts again",
        level="WARNING",
    )
    return EXIT_INTERRUPTED


def _train(
    data_dir: Path, job: JobRecord, events: StoreEvents, should_stop: StopFlag, watch: FunctionWatch
) -> Any:
    """Start the job's functions (into ``watch``, which restarts a dead one and holds them for cleanup)
    and run the engine to the end."""
    job_id, meta = job.job_id, job.meta
    resume_from = meta.resume.resume_from
    events.log(f"job {job_id} running on the local OPD engine ({meta.training_type})")
    if resume_from:
        events.log(f"resuming from {Path(resume_from).name} ({resume_from})")
    for note in meta.substitutions:
        events.log(note)
    _enough_samples(meta.train_file, job.plan.batch_size)
    rewards, rollout = _start_functions(meta.functions, data_dir / "jobs" / job_id, events, watch)
    watch.start()
    from opd_nb.engine.trainer import run as engine_run

    return engine_run(engine_job(data_dir, job, rewards, rollout), events, should_stop)


def _enough_samples(train_file: str, batch_size: int) -> None:
    """Fail the job as Bailian fails it when its training file has no more samples than ``batch_size``
    (:data:`~opd_nb.spec.submit_rules.TOO_FEW_SAMPLES`): the platform accepts it and fails it later."""
    with open(train_file, encoding="utf-8", errors="replace") as f:
        rows = sum(1 for line in f if line.strip())
    problem = too_few_samples(rows, batch_size)
    if problem is not None:
        raise EngineError(f"{problem}; {too_few_samples_fix(rows, batch_size)}")


def engine_job(
    data_dir: Path, job: JobRecord, rewards: list[RewardEndpoint], rollout: RolloutEndpoint | None
) -> EngineJob:
    """The engine's view of a stored job, its functions already serving at ``rewards`` and ``rollout``."""
    meta = job.meta
    return EngineJob(
        job_id=job.job_id,
        student_path=meta.student_path,
        teacher_path=meta.teacher_path,
        train_file=meta.train_file,
        validation_file=meta.validation_file,
        hyper_parameters=job.plan,
        rewards=rewards,
        rollout=rollout,
        output_dir=str(data_dir / "jobs" / job.job_id / "output"),
        resume_from=meta.resume.resume_from,
    )


def _start_functions(
    specs: list[JobFunction], job_dir: Path, events: StoreEvents, watch: FunctionWatch
) -> tuple[list[RewardEndpoint], RolloutEndpoint | None]:
    """One function server per registered function of the job, as the endpoints the engine calls (whose
    calls wait for a restarted server as long as its restart may take)."""
    from opd_nb.functions.server import FunctionServer, startup_seconds

    watch.startup_s = startup_seconds()
    reconnect_s = watch.startup_s + RESTART_GRACE_S

    rewards: list[RewardEndpoint] = []
    rollout: RolloutEndpoint | None = None
    for spec in specs:
        events.log(f"starting {spec.kind} function {spec.name!r} ({spec.processor})")
        tracing = function_env(os.environ, f"opd {job_dir.name} {spec.kind} {spec.name}")
        if tracing:
            events.log(
                f"{spec.kind} function {spec.name!r}: its spans are traced (opd traces {job_dir.name})"
            )
        server = FunctionServer.start(
            spec.code_dir,
            spec.kind,
            spec.processor,
            log_path=job_dir / "functions" / f"{spec.entity_id}.log",
            env={**(spec.env or {}), **tracing},
            startup_timeout=watch.startup_s,
        )
        watch.add(server, f"{spec.kind} function {spec.name!r}")
        events.log(f"{spec.kind} function {spec.name!r} serving at {server.url}")
        opts = spec.call_options()
        if spec.kind == "rollout":
            rollout = RolloutEndpoint(name=spec.name, url=server.url, **opts, reconnect_s=reconnect_s)
            continue
        rewards.append(reward_endpoint(spec, server.url, reconnect_s))
    return rewards, rollout


def reward_endpoint(spec: JobFunction, url: str, reconnect_s: float = 0.0) -> RewardEndpoint:
    """How the engine calls a reward: the submitted weight as sent (0.0 weighs nothing), and only an
    absent one takes :class:`RewardEndpoint`'s default; never a truthiness default that reads 0 as 1."""
    weight = {"weight": spec.weight} if spec.weight is not None else {}
    return RewardEndpoint(
        name=spec.name,
        url=url,
        kind="group_reward" if spec.kind == "group_reward" else "reward",
        reward_metric_weight=spec.reward_metric_weight,
        **weight,
        **spec.call_options(),
        reconnect_s=reconnect_s,
    )


def _publish(store: Store, events: StoreEvents, job_id: str, result: Any) -> None:
    """Record the engine's result and publish the final checkpoint as ``opd-local/<job_id>``."""
    published = f"opd-local/{job_id}"
    outcome = TrainingOutcome(
        final_checkpoint=result.final_checkpoint,
        steps=result.steps,
        epochs=result.epochs,
        metrics_tail=result.metrics_tail,
    )
    store.update_meta(job_id, lambda meta: meta.model_copy(update={"outcome": outcome}))
    events.log(
        f"published final checkpoint as {published!r} ({result.final_checkpoint}); pass it as "
        "`model` in a later job to continue training"
    )
    store.set_job(
        job_id,
        only_if_status=(RUNNING,),
        status=SUCCEEDED,
        finetuned_output=published,
        end_time=now_text(),
        worker_pid=None,
        message="",
    )
    events.log(f"job {SUCCEEDED}")


def _mark_canceled(store: Store, job_id: str) -> None:
    job = store.job(job_id)
    store.set_job(
        job_id,
        only_if_status=(RUNNING,),
        status=CANCELED,
        end_time=now_text(),
        message=job.cancel_message if job is not None else cancel_message(None),
        worker_pid=None,
    )


def _failure_message(exc: Exception) -> tuple[str, bool]:
    """(message for the job, whether it is an explained failure that needs no traceback)."""
    explained = isinstance(exc, EngineError | OpdError)
    if isinstance(exc, ImportError) and "opd_nb.engine" in str(exc):
        return f"the local OPD engine is not available: {exc} (install opd-nb[engine])", explained
    if explained:
        return str(exc), True
    return f"internal error in the local engine: {type(exc).__name__}: {exc}", False


def _record_failure(
    store: Store,
    events: StoreEvents,
    job_id: str,
    exc: Exception,
    servers: list[Any],
    died: str | None = None,
) -> None:
    """Log why the job failed (with the traceback and function logs when unexplained) and mark it FAILED;
    `died`: a function server's death stopped it (the platform's failure, said so, not the user's code)."""
    message, explained = _failure_message(exc)
    code = "JobFailed"
    if died is not None:
        message, explained, code = died, True, DIED_CODE
    full = full_disk_failure(store.data_dir, [message], exc)
    if full is not None:
        message, explained, code = f"{full} (the error: {message})", True, DISK_FULL
    lines: list[str] = []
    for server in servers:  # what the function servers wrote last, each line at the level it was written
        for level, line in function_log_lines(server.log_lines(10), f"{server.func_type} function"):
            lines += events.lines(line, level=level)
    if not explained:
        lines += events.lines(traceback.format_exc(), level="ERROR")
    # The docs say to read the end of a failed job's log: the cause is its last lines.
    lines += events.lines(f"{FAILED}: {message}", level="ERROR")
    fail_job(store, job_id, code, message, lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m opd_nb.server.worker DATA_DIR JOB_ID", file=sys.stderr)
        return 2
    parent = settings.WATCH_PID.get() or settings.SERVER_PID.get() or os.getppid()
    watch = (parent, Path(args[0]), args[1])
    threading.Thread(target=_watch_parent, args=watch, name="opd-watch-parent", daemon=True).start()
    keep_own_log_under()  # worker.log: a chatty job cannot fill the disk through it
    _lower_priority(settings.WORKER_NICE.raw() or str(settings.WORKER_NICE.default))
    return run_job(Path(args[0]), args[1])


def _lower_priority(nice: str) -> None:
    """Training is background work: the control plane (and the user's notebook) stay responsive.

    ``os.nice`` alone did nothing against other sessions: the worker starts a session of its own, and
    with the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) each session
    is one scheduling group with a fair share, whatever its members' nice. The group's nice is set
    through ``/proc/self/autogroup`` (lowering one's own priority needs no privilege)."""
    try:
        value = int(nice)
        os.nice(value)
    except (OSError, ValueError):
        return
    try:
        Path("/proc/self/autogroup").write_text(str(value))
    except OSError:
        pass  # no autogroup (another kernel, or a container without it): the plain nice is all there is


def torch_threads(*, with_functions: bool = False) -> int:
    """``OPD_TORCH_THREADS``, else the standard ``OMP_NUM_THREADS``, else 2 (at the tiny pair's size more
    threads only add synchronisation), or 1 for a job with function servers. OpenMP threads spin while
    they wait: two jobs at once on two cores want 1 each (2 x 2 threads slowed a 55 s job past six
    minutes), and a job's function servers answer beside the teacher's scoring, so a second torch thread
    took the core they need (`bench/tracing_overhead.py`: a reward job's untraced step the same with 1
    thread as with 2, its traced step 31% slower with 2 and within 1% with 1)."""
    try:  # `opd serve` refused a bad value at its start; here a bad one falls through
        threads = settings.TORCH_THREADS.get()
    except OpdError:
        threads = None
    try:
        return threads or max(1, int(os.environ["OMP_NUM_THREADS"]))
    except (KeyError, ValueError):
        return 1 if with_functions else 2


def _set_torch_threads(threads: int) -> None:
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)


if __name__ == "__main__":
    sys.exit(main())
