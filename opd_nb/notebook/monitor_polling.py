"""The job monitor's data side: the polling thread, the event streams, start/stop/wait/cancel.

A mixin of :class:`opd_nb.notebook.monitor.JobMonitor`, which owns the state these methods fill and the
views they refresh (``_render``, ``_refresh_static``). The thread only fetches and sets state; it never
prints (see the monitor's module docstring).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from opd_nb.errors import OpdError
from opd_nb.notebook.job_state import NOT_FOUND, JobState
from opd_nb.notebook.monitor_guard import MonitorGuard
from opd_nb.notebook.monitor_report import MonitorReport

_NO_ANSWER = object()  # what `_call` returns when the request raised (the error is on the job state)


LOG_PAGE = 200  # lines asked for at a time
MAX_LOG_PAGES = 50  # a poll reads at most this many pages (a server that never says it is done)


class JobPolling:
    """Fetching and following: every attribute below is set by the monitor's ``__init__``."""

    job_ids: list[str]
    poll_s: float
    polls: int
    notes: list[str]
    guard: MonitorGuard
    report: MonitorReport
    _client: Any
    _jobs: dict[str, JobState]
    _lock: threading.RLock
    _stop: threading.Event
    _done: threading.Event
    _thread: threading.Thread | None
    _event_threads: list[threading.Thread]
    _widgets: Any

    _render: Callable[[], None]  # the monitor's views (methods of JobMonitor; no no-op stand-ins here)
    _refresh_static: Callable[..., None]
    if TYPE_CHECKING:  # the monitor's snapshot (a property of JobMonitor), declared for the checker only

        @property
        def state(self) -> dict[str, Any]: ...

    # ------------------------------------------------------------------ data
    @property
    def client(self) -> Any:
        if self._client is None:
            from opd_nb.client import JobClient

            self._client = JobClient()
        return self._client

    def _call(self, st: JobState, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(...)`, or `_NO_ANSWER` with the error recorded on the job (the thread must survive)."""
        try:
            return fn(*args, **kwargs)
        except OpdError as exc:
            st.error = str(exc)
        except Exception as exc:  # a flaky network must not kill the polling thread
            st.error = f"{type(exc).__name__}: {exc}"
        return _NO_ANSWER

    def _fetch_job(self, st: JobState) -> bool:
        """Refresh the job itself; False when that failed (an unknown id ends its polling)."""
        try:
            job = self.client.get(st.job_id)
        except OpdError as exc:
            st.error = str(exc)
            if st.job is None and exc.status == 404:
                st.status, st.final = NOT_FOUND, True  # polling again will not make it exist
            return False
        except Exception as exc:  # a flaky network must not kill the polling thread
            st.error = f"{type(exc).__name__}: {exc}"
            return False
        st.error = None
        st.job = job
        st.status = str(job.status)
        return True

    def _fetch_logs(self, st: JobState) -> None:
        """Every new line up to the log's end, in pages: a monitor opened on a long or finished job (or
        one that missed a burst of lines) shows the log's real tail, not where its first page stopped.
        Where the server says the total, lines that would scroll out of the kept tail are skipped."""
        for _ in range(MAX_LOG_PAGES):
            page = self._call(st, self.client.logs, st.job_id, offset=st.log_offset, lines=LOG_PAGE)
            if page is _NO_ANSWER or page is None:
                return
            total = page.total  # lines are numbered from 1 (the SDK's offset=1)
            tail_start = None if total is None else total - (st.logs.maxlen or LOG_PAGE) + 1
            if tail_start is not None and page.offset < tail_start:
                st.log_offset = tail_start  # only the kept tail shows: read from there
                continue
            with self._lock:  # `state` iterates the deque from the main thread
                st.logs.extend(str(line) for line in page.lines)
            st.log_offset = page.next_offset
            done = total is not None and page.next_offset > total
            if done or len(page.lines) < LOG_PAGE or page.next_offset <= page.offset:
                return

    def _fetch_samples(self, st: JobState) -> None:
        """The latest step's recorded samples, fetched again only when a new step has metrics."""
        if st.rollouts_available is False:  # no such endpoint here (Bailian): asking again will not help
            return
        key = (st.metrics[-1].get("step") if st.metrics else None, st.terminal)
        if key == st.rollouts_key:
            return
        page = self._call(st, self.client.rollouts, st.job_id)
        if page is _NO_ANSWER:
            return
        st.rollouts_key = key
        st.rollouts_available = page is not None
        if page is not None:
            with self._lock:
                st.rollouts, st.rollouts_step = list(page.rollouts), page.step

    def _poll_job(self, st: JobState) -> None:
        """Status, metrics, checkpoints and new log lines of one job."""
        if not self._fetch_job(st):
            return
        metrics = self._call(st, self.client.metrics, st.job_id)
        if metrics is not _NO_ANSWER:
            st.metrics_available = metrics is not None  # None: this API has no metrics (the cloud)
            st.metrics = list(metrics or [])
        ckpts = self._call(st, self.client.checkpoints, st.job_id)
        if ckpts is not _NO_ANSWER:
            st.checkpoints = list(ckpts or [])
        for line in [*self.guard.check(self.client, st), *self.report.check(self.client, st)]:
            with self._lock:  # `state` copies the notes from the main thread
                self.notes.append(line)
            if self._widgets is not None:
                self._widgets.show_message(line, "bad")
        self._fetch_samples(st)
        self._fetch_logs(st)
        if st.terminal:
            st.final = True

    def poll_once(self) -> dict[str, Any]:
        """Fetch status, metrics, checkpoints and new log lines of every unfinished job."""
        for st in self._jobs.values():
            if not st.final:
                self._poll_job(st)
        with self._lock:
            self.polls += 1
        self._render()
        return self.state

    def _events_loop(self, st: JobState) -> None:
        try:
            for event in self.client.events(st.job_id):
                if self._stop.is_set():
                    return
                with self._lock:
                    st.events.append(f"{event.kind}: {event.data}")
                if st.final:
                    return
        except Exception as exc:  # events are a nice-to-have; never crash the monitor
            with self._lock:
                st.events.append(f"(event stream ended: {type(exc).__name__})")

    @property
    def done(self) -> bool:
        return all(st.final for st in self._jobs.values())

    # ------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        """Poll once (so an unknown job id is an error right here), then keep polling in the background."""
        if self._thread is None and self.polls == 0:
            self.poll_once()
            missing = [st for st in self._jobs.values() if st.status == NOT_FOUND]
            if len(missing) == len(self._jobs):
                raise OpdError(
                    missing[0].error or f"job {missing[0].job_id} not found",
                    fix="list jobs with `%opd jobs`; check the target with `%opd use`",
                )
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._done.clear()
            self._thread = threading.Thread(target=self._run, name="opd-job-monitor", daemon=True)
            self._thread.start()
        return self

    def _start_event_streams(self) -> None:
        """Cloud: the event stream is the richest view there is (no metrics endpoint)."""
        for st in self._jobs.values():
            t = threading.Thread(
                target=self._events_loop, args=(st,), daemon=True, name=f"opd-events-{st.job_id}"
            )
            t.start()
            self._event_threads.append(t)

    def _run(self) -> None:
        """The polling thread. It holds the client's connections (``with client``: one pool for every
        poll) and closes them when it ends; a later call on the client opens a new pool."""
        client = self.client
        kept = client if hasattr(client, "__exit__") else contextlib.nullcontext()
        try:
            with kept:
                try:
                    self._poll_until_done()
                finally:
                    self._render()
                    self._refresh_static()
        finally:
            # Last: `wait()` returns only once the final snapshot is out, so the cell that waits is
            # still running when it arrives (a runner such as nbval records output only meanwhile).
            self._done.set()

    def _poll_until_done(self) -> None:
        events_started = False
        while not self._stop.is_set():
            self.poll_once()
            self._refresh_static()  # the saved snapshot follows (throttled; at once when all ended)
            if not events_started and any(st.metrics_available is False for st in self._jobs.values()):
                events_started = True
                self._start_event_streams()
            if self.done:
                break
            self._stop.wait(self.poll_s)

    def stop(self) -> None:
        """Stop polling (the jobs keep running)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self.poll_s * 2))

    def wait(self, timeout_s: float | None = None) -> Self:
        """Block until every job is terminal (or `timeout_s`); starts polling if needed."""
        if self._thread is None:
            self.start()
        finished = self._done.wait(timeout_s)
        if not finished:
            raise OpdError(f"jobs still running after {timeout_s}s", fix="call wait() again or cancel()")
        return self

    def cancel(self, job_id: str | None = None) -> list[str]:
        """Cancel one job (or every unfinished one); returns the ids a cancel was sent for."""
        ids = [job_id] if job_id else [i for i, st in self._jobs.items() if not st.terminal]
        sent = []
        for jid in ids:
            st = self._jobs.get(jid)
            if st is None:
                raise OpdError(
                    f"job {jid!r} is not watched by this monitor", fix=f"watched: {', '.join(self.job_ids)}"
                )
            if st.terminal:
                continue
            job = self.client.cancel(jid)
            st.cancel_requested = True
            st.status = str(job.status)
            sent.append(jid)
        self._render()
        return sent
