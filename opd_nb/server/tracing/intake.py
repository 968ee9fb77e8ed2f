"""The control plane's side of tracing: who may send spans, where they go, and what a step's say.

One :class:`TraceIntake` per server. It gives each job's worker the OTLP endpoint and the job's token
(:meth:`worker_env`), accepts an export (:meth:`accept`: the token names the job; each span finds its
step and rollout sample by the SDK's baggage ids, :mod:`opd_nb.traces.ids`), appends the spans to the
job's files (:mod:`opd_nb.server.store.traces`), folds a train step's numbers into its metrics row
(:mod:`opd_nb.traces.summary`) and hands the body on to ``--otlp-forward`` (not one that names a step the
job has not run: that export is not its function servers'). Spans that belong to no
call of the job (the function server's own HTTP spans) are dropped.

A token ends with its job: once the job is SUCCEEDED, FAILED, CANCELED or deleted its exports are a 401
(the status is in the store, so this holds across a restart too; the worker stops the function servers,
which send what they traced last, before it writes the end). A span may name only a step the job has
reached (:func:`last_step`): one past it, or past the plan, is dropped and counted in ``partial_success``,
never stored nor folded into a metrics row, so retention only ever ranks steps the job ran.
"""

from __future__ import annotations

import heapq
import os
import threading
from collections import OrderedDict
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

from opd_nb import settings
from opd_nb.constants import TERMINAL_STATUSES
from opd_nb.server.content_encoding import EncodingRefused
from opd_nb.server.content_encoding import decoded as decoded_body
from opd_nb.server.decoding import body_problem
from opd_nb.server.records import read_owner
from opd_nb.server.store import Store
from opd_nb.server.store.job_record import JobRecord
from opd_nb.server.store.trace_index import read_at
from opd_nb.server.store.traces import TraceFiles
from opd_nb.server.tracing.env import ENDPOINT_ENV, OTLP_PATH, TOKEN_ENV, missing_packages
from opd_nb.server.tracing.keys import TraceKeys
from opd_nb.server.tracing.otlp_decode import JSON, Decoded, OtlpError, decode, media_type, response_body
from opd_nb.server.tracing.otlp_forward import Forwarder
from opd_nb.server.tracing.refusals import Refusals
from opd_nb.traces.ids import KINDS, SAMPLE_ID_KEY, SampleRef
from opd_nb.traces.page import TracesPage
from opd_nb.traces.spans import Span, trajectories
from opd_nb.traces.summary import StepTraces

KEPT_SUMMARIES = 16  # steps whose running numbers stay in memory (an older step's are rebuilt from its file)


class Refused(Exception):
    """An export this server does not take: (HTTP status, code, message)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class TraceIntake:
    def __init__(self, data_dir: Path, store: Store, forwarder: Forwarder | None = None, *, max_body: int):
        self.data_dir = data_dir
        self.max_body = max_body  # what a compressed export may expand to (the server's body cap)
        self.refusals = Refusals(store)
        self.store = store
        self.files = TraceFiles(data_dir)
        self.keys = TraceKeys()
        self.forwarder = forwarder
        self.missing = missing_packages()
        self._steps: OrderedDict[tuple[str, int], StepTraces] = OrderedDict()
        self._lock = threading.Lock()

    # ---- the worker's side ------------------------------------------------------------------------
    def endpoint(self) -> str | None:
        """This server's OTLP URL, once it listens (None for an app without a socket, e.g. a test client)."""
        owner = read_owner(self.data_dir)
        if owner is None or owner.pid != os.getpid():
            return None
        return owner.base_url + OTLP_PATH

    def worker_env(self, job_id: str) -> dict[str, str]:
        """What a job's worker needs to start its function servers with tracing on (empty: off)."""
        url = self.endpoint()
        if url is None or self.missing or not settings.TRACING.get():
            return {}
        return {ENDPOINT_ENV: url, TOKEN_ENV: self.keys.token(job_id)}

    # ---- an export -----------------------------------------------------------------------------------
    def accept(
        self, token: str | None, body: bytes, content_type: str | None, content_encoding: str | None = None
    ) -> tuple[bytes, str]:
        """Store (and forward) one export; returns the OTLP answer and its media type. An export the job's
        token opens but this server cannot read is refused, and the job's log and metrics say so."""
        job = self._job_of(token)
        if self.missing:
            raise Refused(
                501,
                "TracingNotInstalled",
                f"opd serve lacks {', '.join(self.missing)}: install opd-nb[tracing]",
            )
        try:
            kind, body, decoded = self._decode(body, content_type, content_encoding)
        except Refused as exc:
            self.refusals.export_refused(job.job_id, done_step(job), exc.status, exc.message)
            raise
        with self.files.lock(job.job_id):  # DELETE takes it too: no export lands after the job's files go
            if self.store.job(job.job_id) is None:
                raise Refused(
                    401,
                    "InvalidTraceToken",
                    f"the trace token of job {job.job_id} ended with the job (was deleted)",
                )
            foreign = self._store(job.job_id, decoded, last_step(job))
        if decoded.rejected:
            self.refusals.spans_rejected(job.job_id, done_step(job), decoded.rejected, decoded.reason)
        if self.forwarder is not None and not foreign:  # an export naming a step the job has not run is
            self.forwarder.send(body, kind)  # not its function servers': the user's collector never sees it
        return response_body(decoded, kind), kind

    def _decode(
        self, body: bytes, content_type: str | None, encoding: str | None
    ) -> tuple[str, bytes, Decoded]:
        """The export's media type, its body with its Content-Encoding undone (to the body cap; what the
        forwarder sends on) and its spans; a JSON body is held to the rules of every other JSON body
        (:mod:`opd_nb.server.decoding`)."""
        try:
            kind = media_type(content_type)
            if encoding:
                body = decoded_body(body, encoding, self.max_body)
                problem = body_problem(body) if kind == JSON else None
                if problem:
                    raise OtlpError(problem)
            return kind, body, decode(body, kind)
        except EncodingRefused as exc:
            raise Refused(exc.status, exc.code, exc.message) from None
        except ValueError as exc:
            raise Refused(400, "InvalidParameter", str(exc)) from None

    @contextmanager
    def deleting(self, job_id: str) -> Generator[None]:
        """Hold the job's trace directory while it is deleted: an export that checked the job before
        finishes first, and one after finds the job deleted (its token ended with it)."""
        with self.files.lock(job_id):
            yield
            with self._lock:
                for key in [k for k in self._steps if k[0] == job_id]:
                    del self._steps[key]
            self.refusals.forget(job_id)

    def _job_of(self, token: str | None) -> JobRecord:
        """The live job a token opens; a 401 for any other token, and for one whose job has ended."""
        job_id = self.keys.job_of(token)
        if job_id is None:
            raise Refused(
                401,
                "InvalidTraceToken",
                "this route takes only the token opd serve gives a job's function servers",
            )
        job = self.store.job(job_id)
        ended = "was deleted" if job is None else _ended(job.status)
        if job is None or ended:
            raise Refused(
                401, "InvalidTraceToken", f"the trace token of job {job_id} ended with the job ({ended})"
            )
        return job

    def _store(self, job_id: str, decoded: Decoded, last: int) -> int:
        """Append each step's spans to its file and fold a train step's; spans past `last` are refused
        (their count is returned)."""
        foreign = 0
        by_trace: dict[str, SampleRef] = {}
        for s in decoded.spans:  # each span's ids read once (the SDK stamps them on every span)
            if s.trace_id not in by_trace and (ref := s.sample()) is not None:
                by_trace[s.trace_id] = ref
        groups: dict[tuple[str, int], list[Span]] = {}
        for s in decoded.spans:
            ref = by_trace.get(s.trace_id)
            if ref is not None and _in_range(ref, last):
                groups.setdefault((ref.kind, ref.step), []).append(s)
            elif ref is not None or SAMPLE_ID_KEY in s.attributes:  # ours, but no step the job has run
                decoded.rejected += 1
                foreign += 1
                decoded.reason = (
                    f"a span names a step the job has not run (train 1-{last}, evaluation 0-{last})"
                )
        for (kind, step), spans in groups.items():
            added = self.files.append(job_id, kind, step, spans, ran_through=last)
            dropped = len(spans) - added.kept
            decoded.rejected += dropped
            if dropped:
                decoded.reason = f"step {step} holds as many spans as opd serve keeps for one step"
            if kind == "train":
                self._fold(job_id, step, spans[: added.kept], added.new_file)
        return foreign

    def _fold(self, job_id: str, step: int, spans: list[Span], new_file: bool) -> None:
        """Add spans to the step's running numbers and write them into its metrics row."""
        with self._lock:
            acc = self._steps.pop((job_id, step), None)
            if acc is None and not new_file:  # a restart, or the step left memory: its file has all
                acc = StepTraces()
                acc.add(self.files.spans(job_id, "train", step))
            else:  # (a step's first batch is all its file holds: no need to read it back)
                acc = acc or StepTraces()
                acc.add(spans)
            self._steps[(job_id, step)] = acc
            while len(self._steps) > KEPT_SUMMARIES:
                self._steps.popitem(last=False)
            metrics = acc.metrics()
        if metrics:
            self.store.add_metrics(job_id, step, {"step": step, **metrics})

    # ---- reading ------------------------------------------------------------------------------------
    def page(
        self, job_id: str, step: int | None, kind: str | None, ref: tuple[int | None, int | None], limit: int
    ) -> TracesPage:
        """A step's trajectories (default: the latest step with spans), optionally one group/sample's."""
        by_kind = self.files.steps(job_id)
        steps = by_kind[kind] if kind else sorted(set(by_kind["train"]) | set(by_kind["validation"]))
        shown = step if step is not None else (steps[-1] if steps else None)
        if shown is None:
            return TracesPage(job_id=job_id, kind=kind, steps_by_kind=by_kind)
        indexes = [ix for k in ((kind,) if kind else KINDS) if (ix := self.files.index(job_id, k, shown))]
        group, sample = ref
        calls = heapq.merge(*(ix.calls for ix in indexes), key=lambda c: (c.start_ms, c.trace_id))
        matching = [c for c in calls if _matches(c.sample, group, sample)]
        chosen = matching[:limit]
        spans = [s for c in chosen for s in read_at(c.path, c.places())]
        peers: dict[str, list[float]] = {}
        acc = StepTraces()
        for ix in indexes:
            for name, took in ix.peers.items():
                peers.setdefault(name, []).extend(took)
            acc.merge(ix.summary)
        return TracesPage(
            job_id=job_id,
            step=shown,
            kind=kind,
            steps_by_kind=by_kind,
            trajectories=trajectories(spans, peers),
            total=len(matching),
            metrics=acc.metrics(),
        )

    def close(self) -> None:
        if self.forwarder is not None:
            self.forwarder.close()


def last_step(job: JobRecord) -> int:
    """The highest step a span of `job` may name now: the step it runs (one past its last finished one),
    never past its planned ``total_steps``; 1 before its first step is done (step 0 is the evaluation
    before training). A train step's calls run after the previous step's progress is stored, and an
    evaluation's before its own step's, so no real span is later than this."""
    progress = job.progress
    if progress is None:
        return 1
    running = progress.step + 1
    return min(running, progress.total_steps) if progress.total_steps > 0 else running


def done_step(job: JobRecord) -> int:
    """The job's last finished step (0 before its first): the metrics row its refusal counts go into, a
    row the job already has, so a refused export never makes a row of its own (retention, resumes)."""
    return job.progress.step if job.progress is not None else 0


def _in_range(ref: SampleRef, last: int) -> bool:
    """Train steps count from 1 (the trainer names a step after the ones done); an evaluation's from 0."""
    return (1 if ref.kind == "train" else 0) <= ref.step <= last


def _ended(status: str) -> str:
    return f"it is {status}" if status in TERMINAL_STATUSES else ""


def _matches(ref: SampleRef | None, group: int | None, sample: int | None) -> bool:
    if group is None and sample is None:
        return True
    if ref is None:
        return False
    return (group is None or ref.group == group) and (sample is None or ref.sample == sample)
