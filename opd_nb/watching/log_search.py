"""`opd logs JOB --search TEXT [--tail N]`: the lines of a job's log that contain a text.

Bailian's log endpoint pages by line (``offset``, ``line``) and has no search, so the client reads
the pages and keeps the matching lines with their numbers (case-insensitive, as ``bl finetune logs
--search`` does); ``tail`` keeps the last N of them, or the last N lines without a search.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from opd_nb.results import ResultMixin

PAGE = 10000  # the most lines one request may ask for


class LogLine(BaseModel):
    line: int  # 1-based line number in the job's log
    text: str


class LogSearch(ResultMixin, BaseModel):
    """JSON: ``{"job_id", "search", "tail", "matched", "lines": [{"line", "text"}]}``."""

    job_id: str
    search: str | None
    tail: int | None
    matched: int  # matching lines in the whole log (before --tail)
    lines: list[LogLine]

    def __str__(self) -> str:
        if not self.lines:
            what = f"containing {self.search!r}" if self.search else ""
            return f"{self.job_id}: no log lines {what}".rstrip()
        return "\n".join(f"{ln.line}: {ln.text}" for ln in self.lines)


def search_logs(client: Any, job_id: str, text: str | None, tail: int | None = None) -> LogSearch:
    """Read the whole log page by page; keep the lines containing `text` (all without one), the last `tail`."""
    needle = (text or "").lower()
    found: list[LogLine] = []
    offset = 1
    while True:
        page = client.logs(job_id, offset=offset, lines=PAGE)
        found += [
            LogLine(line=offset + i, text=line) for i, line in enumerate(page.lines) if needle in line.lower()
        ]
        if len(page.lines) < PAGE:
            break
        offset = page.next_offset
    kept = found[-tail:] if tail else found
    return LogSearch(job_id=job_id, search=text, tail=tail, matched=len(found), lines=kept)
