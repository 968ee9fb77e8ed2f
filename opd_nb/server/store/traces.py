"""A job's spans on disk: one JSONL file per step and kind, kept like its rollout records.

``jobs/<job_id>/traces/train-000012.jsonl`` holds the spans of train step 12's calls (validation:
``validation-000012.jsonl``), one :class:`~opd_nb.traces.spans.Span` per line, appended as export
batches arrive. Retention is the rollouts' rule (:func:`opd_nb.engine.rollouts.expired_steps`: the
newest ``OPD_ROLLOUTS_KEEP_STEPS`` train steps, plus every evaluation's), ranking only the steps the job
has run (``ran_through``: a file past it, as a resumed job's steps to be run again, is no newer step
that could push a real one out); a step's file stops growing
at :data:`MAX_STEP_BYTES`. The files live in the job's directory, so they survive a restart and go with
the job when it is deleted. A line a killed server left half-written is skipped on reading. A page of a
step is read through its index (:mod:`opd_nb.server.store.trace_index`), never the whole step.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from opd_nb.engine.rollouts import expired_steps, keep_steps
from opd_nb.server.store.trace_index import StepIndex, StepIndexes, lines
from opd_nb.traces.ids import KINDS
from opd_nb.traces.spans import Span

DIRNAME = "traces"
MAX_STEP_BYTES = 32 * 2**20  # one step's spans; past it a step's further spans are dropped (and counted)
_FILE = re.compile(r"^(train|validation)-(\d+)\.jsonl$")


class Appended(NamedTuple):
    kept: int  # lines written (the rest would pass the step's cap)
    new_file: bool  # the step had no file before: these lines are all it holds


def file_name(kind: str, step: int) -> str:
    return f"{kind}-{step:06d}.jsonl"


class TraceFiles:
    """Appends, reads and retains the span files of every job under ``data_dir/jobs``."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self._locks: dict[str, threading.RLock] = {}  # per job: its appends, retention and deletion
        self._locks_lock = threading.Lock()
        self._indexes = StepIndexes()

    def lock(self, job_id: str) -> threading.RLock:
        """The one lock of a job's trace directory: every append and its retention take it, and so does
        the job's deletion (:meth:`opd_nb.server.tracing.intake.TraceIntake.deleting`)."""
        with self._locks_lock:
            return self._locks.setdefault(job_id, threading.RLock())

    def dir(self, job_id: str) -> Path:
        return self.data_dir / "jobs" / job_id / DIRNAME

    def steps(self, job_id: str) -> dict[str, list[int]]:
        """The steps with spans on disk, per kind, ascending."""
        out: dict[str, list[int]] = {k: [] for k in KINDS}
        try:
            names = os.listdir(self.dir(job_id))
        except (FileNotFoundError, NotADirectoryError):
            return out
        for name in names:
            if m := _FILE.match(name):
                out[m.group(1)].append(int(m.group(2)))
        return {k: sorted(v) for k, v in out.items()}

    def add(self, job_id: str, kind: str, step: int, spans: Iterable[Span]) -> int:
        """Append `spans` to the step's file; returns how many were dropped (the step's file is full)."""
        spans = list(spans)
        return len(spans) - self.append(job_id, kind, step, spans).kept

    def append(
        self, job_id: str, kind: str, step: int, spans: list[Span], ran_through: int | None = None
    ) -> Appended:
        """Append `spans` to the step's file, as many as its cap allows, and say what that did.

        `ran_through`: the job's latest step (None: every step on disk counts as run), which retention
        ranks up to."""
        lines = [s.model_dump_json() + "\n" for s in spans]
        if not lines:
            return Appended(kept=0, new_file=False)
        path = self.dir(job_id) / file_name(kind, step)
        with self.lock(job_id):
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                size = -1
            new_file = size < 0
            if new_file:
                path.parent.mkdir(parents=True, exist_ok=True)
            kept = 0
            size = max(size, 0)
            for line in lines:
                size += len(line.encode())
                if size > MAX_STEP_BYTES:
                    break
                kept += 1
            if kept:
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write("".join(lines[:kept]))
            if kind == "train" and new_file:  # only a new step can push an old one out
                self._retain(job_id, ran_through)
        return Appended(kept=kept, new_file=new_file and kept > 0)

    def read(self, job_id: str, kind: str, step: int) -> list[Span]:
        """The spans of one step and kind (none when nothing was received, or retention removed them)."""
        return list(self.spans(job_id, kind, step))

    def spans(self, job_id: str, kind: str, step: int) -> Iterator[Span]:
        """The same, one at a time (a step may hold tens of thousands)."""
        return (span for _, span in lines(self.dir(job_id) / file_name(kind, step)))

    def index(self, job_id: str, kind: str, step: int) -> StepIndex | None:
        """The step file's index (:mod:`opd_nb.server.store.trace_index`; None: no such file)."""
        return self._indexes.get(self.dir(job_id) / file_name(kind, step))

    def _retain(self, job_id: str, ran_through: int | None) -> None:
        on_disk = self.steps(job_id)
        ran = [s for s in on_disk["train"] if ran_through is None or s <= ran_through]
        for step in expired_steps(ran, set(on_disk["validation"]), keep_steps()):
            (self.dir(job_id) / file_name("train", step)).unlink(missing_ok=True)
