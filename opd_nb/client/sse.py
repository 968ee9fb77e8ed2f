"""Server-sent events (a job's `/stream`) read into :class:`JobEvent`, for blocking and async lines.

One incremental parser, fed line by line, so the sync and the async client read a stream alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator

from opd_nb.client.job_results import JobEvent


class SseParser:
    """Incremental server-sent-events parser (one line at a time)."""

    def __init__(self) -> None:
        self.kind: str = "message"
        self.data: list[str] = []
        self.ident: int | None = None

    def feed(self, raw: str) -> JobEvent | None:
        line = raw.rstrip("\r\n")
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self.kind = value
        elif field == "data":
            self.data.append(value)
        elif field == "id" and value.isdigit():
            self.ident = int(value)
        return None

    def flush(self) -> JobEvent | None:
        event = None
        if self.data:
            kind = self.kind if self.kind != "message" else "log"
            event = JobEvent(kind=kind, data="\n".join(self.data), id=self.ident)
        self.kind, self.data, self.ident = "message", [], None
        return event


def parse_sse(lines: Iterable[str]) -> Iterator[JobEvent]:
    parser = SseParser()
    for raw in lines:
        event = parser.feed(raw)
        if event is not None:
            yield event
    event = parser.flush()
    if event is not None:
        yield event


async def aparse_sse(lines: AsyncIterator[str]) -> AsyncIterator[JobEvent]:
    parser = SseParser()
    async for raw in lines:
        event = parser.feed(raw)
        if event is not None:
            yield event
    event = parser.flush()
    if event is not None:
        yield event
