"""An index of one step's span file, so a trace read costs what it answers, not the size of the step.

Why: a read parsed every span of the step into memory and built every tree to answer ``limit=1``; one
step of 60,000 spans and 10 such reads at once took the server from 128 MB to 3.2 GB. A step file is
read once per version (its inode, size and modification time: the files only grow, or go), one line
at a time, into a :class:`StepIndex`: per traced call its start, its rollout sample and where its lines
are; the durations that decide which spans are slow (:func:`opd_nb.traces.spans.peer_durations`, over
the whole step); and the step's trace numbers. A read then picks its calls from the index and parses
only their lines. A few indexes stay in memory (:data:`KEPT`), shared by concurrent readers.
"""

from __future__ import annotations

import os
import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from opd_nb.traces.ids import ATTEMPT_ID_KEY, ROLLOUT_ID_KEY, SAMPLE_ID_KEY, SampleRef
from opd_nb.traces.spans import Span, peer_durations, trajectory
from opd_nb.traces.summary import StepTraces

KEPT = 4  # step indexes kept in memory (about 500 bytes a span: 30 MiB for one of 60,000 spans)
_ID_KEYS = (SAMPLE_ID_KEY, ROLLOUT_ID_KEY, ATTEMPT_ID_KEY)

Version = tuple[int, int, int]  # a step file's inode, size and modification time (ns)


class Where(NamedTuple):
    offset: int
    length: int


class Call(NamedTuple):
    """One traced call (a trace) of the step: what a read orders and filters by, and where its lines are."""

    start_ms: float
    trace_id: str
    sample: SampleRef | None
    path: Path
    lines: array[int]  # offset, length, offset, length, ...: a few bytes a span

    def places(self) -> list[Where]:
        return [Where(self.lines[i], self.lines[i + 1]) for i in range(0, len(self.lines), 2)]


class StepIndex(NamedTuple):
    version: Version
    calls: list[Call]  # by start, then trace id (the order of a page)
    peers: dict[str, list[float]]
    summary: StepTraces  # the spans tied to a train sample


def lines(path: Path) -> Iterator[tuple[Where, Span]]:
    """Each whole span of a step file with where its line is; a line a killed server left half-written
    is skipped. One line in memory at a time."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed below; a missing file is no spans)
    except (FileNotFoundError, NotADirectoryError):
        return
    with fh:
        offset = 0
        for raw in fh:
            where = Where(offset, len(raw))
            offset += len(raw)
            try:
                yield where, Span.model_validate_json(raw.decode("utf-8", errors="replace"))
            except (ValidationError, ValueError):
                continue


def read_at(path: Path, places: list[Where]) -> list[Span]:
    """The spans on the lines at `places` (none when the file went: retention or a delete)."""
    out: list[Span] = []
    try:
        with open(path, "rb") as fh:
            for where in sorted(places):
                fh.seek(where.offset)
                out.append(Span.model_validate_json(fh.read(where.length).decode("utf-8", errors="replace")))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return out


class _Light(NamedTuple):
    """What a span's tree and slow mark need of it (its sample ids, not its other attributes): a few
    hundred bytes where a parsed span holds its messages."""

    span_id: str
    parent_id: str | None
    name: str
    kind: str
    start_ms: float
    duration_ms: float
    status: str
    ids: tuple[tuple[str, Any], ...]

    def span(self, trace_id: str) -> Span:
        fields = self._asdict()
        fields["attributes"] = dict(fields.pop("ids"))
        return Span.model_construct(trace_id=trace_id, **fields)


def build(path: Path, version: Version) -> StepIndex:
    """Read a step file once: its calls in page order, its slow-span peers and its trace numbers."""
    light: dict[str, list[_Light]] = {}
    places: dict[str, list[Where]] = {}
    summary = StepTraces()
    for where, span in lines(path):
        if (ref := span.sample()) is not None and ref.kind == "train":
            summary.add((span,))
        light.setdefault(span.trace_id, []).append(
            _Light(
                span.span_id,
                span.parent_id,
                sys.intern(span.name),
                sys.intern(span.kind),
                span.start_ms,
                span.duration_ms,
                span.status,
                tuple((k, span.attributes[k]) for k in _ID_KEYS if k in span.attributes),
            )
        )
        places.setdefault(span.trace_id, []).append(where)
    calls: list[Call] = []
    peers: dict[str, list[float]] = {}
    for trace_id in list(light):  # one call's tree at a time
        tree = trajectory(trace_id, [s.span(trace_id) for s in light.pop(trace_id)])
        for name, took in peer_durations((tree,)).items():
            peers.setdefault(name, []).extend(took)
        lines_at = array("q", (n for where in places.pop(trace_id) for n in where))
        calls.append(Call(tree.start_ms, trace_id, tree.sample, path, lines_at))
    calls.sort(key=lambda c: (c.start_ms, c.trace_id))
    return StepIndex(version=version, calls=calls, peers=peers, summary=summary)


class StepIndexes:
    """The indexes of recently read step files, each built once per version of its file."""

    def __init__(self, kept: int = KEPT):
        self.kept = kept
        self._indexes: OrderedDict[Path, StepIndex] = OrderedDict()
        self._building: dict[Path, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, path: Path) -> StepIndex | None:
        """The index of the file at `path` as it is now (None: no such file)."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            with self._lock:
                self._indexes.pop(path, None)
            return None
        version = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            building = self._building.setdefault(path, threading.Lock())
        with building:  # readers of one step wait for one build and share it
            with self._lock:
                index = self._indexes.get(path)
                if index is not None and index.version == version:
                    self._indexes.move_to_end(path)
                    return index
            index = build(path, version)
            with self._lock:
                self._indexes[path] = index
                self._indexes.move_to_end(path)
                while len(self._indexes) > self.kept:
                    old, _ = self._indexes.popitem(last=False)
                    self._building.pop(old, None)
            return index
