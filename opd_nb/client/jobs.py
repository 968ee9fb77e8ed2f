"""One job client for the CLI and the notebook, sync and async, over httpx.

Talks to either control plane with the same code. Retries 429/5xx/connection errors with
exponential backoff; turns every 4xx into an :class:`OpdError` carrying the service's code and
message. The API key goes into the Authorization header only: never logged or repr'd.
"""

from __future__ import annotations

import asyncio
import html
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
from pydantic import BaseModel, Field

from opd_nb.client.target import Target, resolve_target
from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELED"})
_STATUS_COLOR = {
    "SUCCEEDED": "green",
    "FAILED": "red",
    "CANCELED": "yellow",
    "RUNNING": "cyan",
    "PENDING": "white",
}


class Job(ResultMixin, BaseModel):
    job_id: str
    job_name: str | None = None
    status: str = "UNKNOWN"
    model: str | None = None
    training_type: str | None = None
    teacher_model: str | None = None
    finetuned_output: str | None = None
    create_time: str | None = None
    end_time: str | None = None
    hyper_parameters: dict[str, Any] = Field(default_factory=dict)
    message: str | None = None
    progress: dict[str, Any] | None = None
    raw: dict[str, Any] = Field(default_factory=dict, repr=False)

    @classmethod
    def from_output(cls, out: dict[str, Any]) -> Job:
        fields = {k: out.get(k) for k in cls.model_fields if k not in ("raw",) and out.get(k) is not None}
        return cls(**fields, raw=out)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def summary(self) -> str:
        prog = ""
        if self.progress and self.progress.get("total_steps"):
            prog = f" step {self.progress.get('step')}/{self.progress.get('total_steps')}"
        extra = f" -> {self.finetuned_output}" if self.finetuned_output else ""
        msg = f" ({self.message})" if self.message and self.status == "FAILED" else ""
        return f"{self.job_id} {self.status}{prog} {self.model or ''}{extra}{msg}".rstrip()

    def __str__(self) -> str:
        return self.summary()

    def _rows(self) -> list[tuple[str, str]]:
        rows = [
            ("job", self.job_id),
            ("name", self.job_name or ""),
            ("status", self.status),
            ("model", self.model or ""),
            ("type", self.training_type or ""),
        ]
        if self.teacher_model:
            rows.append(("teacher", self.teacher_model))
        if self.progress and self.progress.get("total_steps"):
            rows.append(("progress", f"{self.progress.get('step')}/{self.progress.get('total_steps')} steps"))
        if self.finetuned_output:
            rows.append(("output", self.finetuned_output))
        if self.message:
            rows.append(("message", self.message))
        rows += [("created", self.create_time or ""), ("ended", self.end_time or "")]
        return rows

    def _repr_html_(self) -> str:
        color = _STATUS_COLOR.get(self.status, "gray")
        body = "".join(
            f"<tr><th style='text-align:left'>{k}</th><td>{html.escape(str(v))}</td></tr>"
            for k, v in self._rows()
        )
        return (
            f"<div><span style='color:{color};font-weight:bold'>{html.escape(self.status)}</span>"
            f"<table>{body}</table></div>"
        )

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(show_header=False, box=None)
        for key, value in self._rows():  # cells are Text: user strings are not read as rich markup
            style = _STATUS_COLOR.get(value, "") if key == "status" else ""
            table.add_row(Text(key), Text(str(value), style=style))
        return table


class JobList(ResultMixin, BaseModel):
    jobs: list[Job]
    total: int
    page: int = 1
    size: int = 20

    def _repr_html_(self) -> str:
        head = "<tr><th>job</th><th>status</th><th>model</th><th>created</th><th>output</th></tr>"
        rows = "".join(
            f"<tr><td>{html.escape(j.job_id)}</td><td>{html.escape(j.status)}</td><td>{html.escape(j.model or '')}"
            f"</td><td>{html.escape(j.create_time or '')}</td><td>{html.escape(j.finetuned_output or '')}</td></tr>"
            for j in self.jobs
        )
        return f"<table>{head}{rows}</table><small>{len(self.jobs)} of {self.total} jobs</small>"

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"{len(self.jobs)} of {self.total} jobs")
        for col in ("job", "status", "model", "created", "output"):
            table.add_column(col)
        for j in self.jobs:  # cells are Text: user strings are not read as rich markup
            table.add_row(
                Text(j.job_id),
                Text(j.status, style=_STATUS_COLOR.get(j.status, "")),
                Text(j.model or ""),
                Text(j.create_time or ""),
                Text(j.finetuned_output or ""),
            )
        return table

    def __str__(self) -> str:
        return "\n".join(j.summary() for j in self.jobs) or "no jobs"


class LogPage(ResultMixin, BaseModel):
    job_id: str
    lines: list[str]
    offset: int
    next_offset: int
    total: int | None = None

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"


class JobEvent(BaseModel):
    kind: str  # "log" | "status" | "error"
    data: str
    id: int | None = None

    @property
    def status(self) -> str | None:
        if self.kind != "status":
            return None
        try:
            return json.loads(self.data).get("status")
        except (ValueError, AttributeError):
            return self.data.strip() or None


class Checkpoint(BaseModel):
    name: str
    step: int
    path: str
    created_at: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    published: bool = False


def _raise_for(resp: httpx.Response, what: str) -> None:
    try:
        body = resp.json()
    except ValueError:
        body = {}
    code = body.get("code") if isinstance(body, dict) else None
    message = (
        (body.get("message") if isinstance(body, dict) else None) or resp.text[:300] or resp.reason_phrase
    )
    fix = None
    if resp.status_code == 401:
        fix = "set DASHSCOPE_API_KEY in the environment or the workspace's .env"
    raise OpdError(f"{what} failed: [{resp.status_code} {code or 'Error'}] {message}", fix=fix)


def _output(resp: httpx.Response) -> Any:
    body = resp.json()
    if not isinstance(body, dict):
        return body
    return body.get("output", body.get("data", body))


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


def _backoff(attempt: int) -> float:
    return min(0.5 * 2**attempt, 8.0)


class _Base:
    def __init__(self, target: Target | None = None, *, timeout: float = 30.0, retries: int = 3):
        self.target = target or resolve_target()
        self.timeout = timeout
        self.retries = retries

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "opd-nb"}
        if self.target.api_key is not None:
            headers["Authorization"] = f"Bearer {self.target.api_key.get_secret_value()}"
        return headers

    def _unreachable(self, exc: Exception) -> OpdError:
        fix = (
            "start it with `opd serve` (or `%opd serve start`)"
            if self.target.kind == "local"
            else "check the network and DASHSCOPE_HTTP_BASE_URL"
        )
        return OpdError(
            f"cannot reach the {self.target.kind} control plane at {self.target.base_url}: "
            f"{type(exc).__name__}",
            fix=fix,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target})"


class JobClient(_Base):
    """Blocking client (CLI, widgets' polling threads)."""

    def _request(self, method: str, path: str, what: str, **kw: Any) -> httpx.Response:
        url = self.target.base_url + path
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                resp = httpx.request(method, url, headers=self._headers(), timeout=self.timeout, **kw)
            except httpx.TransportError as exc:
                last = exc
            else:
                if not _retryable(resp.status_code) or attempt == self.retries:
                    if resp.status_code >= 400:
                        _raise_for(resp, what)
                    return resp
            if attempt < self.retries:
                time.sleep(_backoff(attempt))
        raise self._unreachable(last or RuntimeError("no response"))

    def get(self, job_id: str) -> Job:
        return Job.from_output(_output(self._request("GET", f"/fine-tunes/{job_id}", f"get job {job_id}")))

    def list(self, page: int = 1, size: int = 20) -> JobList:
        out = _output(
            self._request("GET", "/fine-tunes", "list jobs", params={"page_no": page, "page_size": size})
        )
        return JobList(
            jobs=[Job.from_output(j) for j in out.get("jobs") or []],
            total=out.get("total") or 0,
            page=page,
            size=size,
        )

    def logs(self, job_id: str, offset: int = 0, lines: int = 200) -> LogPage:
        out = _output(
            self._request(
                "GET",
                f"/fine-tunes/{job_id}/logs",
                f"logs of {job_id}",
                params={"offset": max(offset, 1), "line": lines},
            )
        )
        return _log_page(job_id, out, offset)

    def events(self, job_id: str) -> Iterator[JobEvent]:
        """Server-sent events until the job ends (`status` events, then `log` lines)."""
        url = f"{self.target.base_url}/fine-tunes/{job_id}/stream"
        try:
            with httpx.stream(
                "GET", url, headers=self._headers(), timeout=httpx.Timeout(self.timeout, read=None)
            ) as r:
                if r.status_code >= 400:
                    r.read()
                    _raise_for(r, f"events of {job_id}")
                yield from _parse_sse(r.iter_lines())
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def cancel(self, job_id: str) -> Job:
        self._request("POST", f"/fine-tunes/{job_id}/cancel", f"cancel {job_id}")
        return self.get(job_id)

    def delete(self, job_id: str) -> None:
        self._request("DELETE", f"/fine-tunes/{job_id}", f"delete {job_id}")

    def wait(
        self,
        job_id: str,
        *,
        poll_s: float = 2.0,
        timeout_s: float | None = None,
        on_update: Callable[[Job], None] | None = None,
    ) -> Job:
        deadline = time.monotonic() + timeout_s if timeout_s else None
        while True:
            job = self.get(job_id)
            if on_update:
                on_update(job)
            if job.terminal:
                return job
            if deadline and time.monotonic() > deadline:
                raise OpdError(
                    f"job {job_id} is still {job.status} after {timeout_s:.0f}s",
                    fix=f"keep watching with `opd watch {job_id}`",
                )
            time.sleep(poll_s)

    def _local_only(self, path: str, what: str) -> Any | None:
        try:
            resp = self._request("GET", path, what)
        except OpdError as exc:
            if "[404 NotFound]" in str(exc) or (self.target.kind == "cloud" and "[404" in str(exc)):
                return None
            raise
        return _output(resp)

    def metrics(self, job_id: str) -> list[dict] | None:
        """Per-step metrics (local control plane only; None where the API has none, e.g. the cloud)."""
        if self.target.kind == "cloud":
            return None
        out = self._local_only(f"/fine-tunes/{job_id}/metrics", f"metrics of {job_id}")
        return None if out is None else list(out.get("metrics") or [])

    def checkpoints(self, job_id: str) -> list[Checkpoint] | None:
        if self.target.kind == "cloud":
            return None
        out = self._local_only(f"/fine-tunes/{job_id}/checkpoints", f"checkpoints of {job_id}")
        return None if out is None else [Checkpoint(**c) for c in out.get("checkpoints") or []]

    def models(self) -> list[dict] | None:
        if self.target.kind == "cloud":
            return None
        out = self._local_only("/models", "list models")
        return None if out is None else list(out.get("models") or [])


class AsyncJobClient(_Base):
    """The same operations for asyncio code (notebook cells with top-level await)."""

    async def _request(self, method: str, path: str, what: str, **kw: Any) -> httpx.Response:
        url = self.target.base_url + path
        last: Exception | None = None
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for attempt in range(self.retries + 1):
                try:
                    resp = await client.request(method, url, headers=self._headers(), **kw)
                except httpx.TransportError as exc:
                    last = exc
                else:
                    if not _retryable(resp.status_code) or attempt == self.retries:
                        if resp.status_code >= 400:
                            _raise_for(resp, what)
                        return resp
                if attempt < self.retries:
                    await asyncio.sleep(_backoff(attempt))
        raise self._unreachable(last or RuntimeError("no response"))

    async def get(self, job_id: str) -> Job:
        return Job.from_output(
            _output(await self._request("GET", f"/fine-tunes/{job_id}", f"get job {job_id}"))
        )

    async def list(self, page: int = 1, size: int = 20) -> JobList:
        resp = await self._request(
            "GET", "/fine-tunes", "list jobs", params={"page_no": page, "page_size": size}
        )
        out = _output(resp)
        return JobList(
            jobs=[Job.from_output(j) for j in out.get("jobs") or []],
            total=out.get("total") or 0,
            page=page,
            size=size,
        )

    async def logs(self, job_id: str, offset: int = 0, lines: int = 200) -> LogPage:
        resp = await self._request(
            "GET",
            f"/fine-tunes/{job_id}/logs",
            f"logs of {job_id}",
            params={"offset": max(offset, 1), "line": lines},
        )
        return _log_page(job_id, _output(resp), offset)

    async def events(self, job_id: str) -> AsyncIterator[JobEvent]:
        url = f"{self.target.base_url}/fine-tunes/{job_id}/stream"
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(self.timeout, read=None)) as client:
                async with client.stream("GET", url, headers=self._headers()) as r:
                    if r.status_code >= 400:
                        await r.aread()
                        _raise_for(r, f"events of {job_id}")
                    parser = _SseParser()
                    async for line in r.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            yield event
                    event = parser.flush()
                    if event is not None:
                        yield event
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    async def cancel(self, job_id: str) -> Job:
        await self._request("POST", f"/fine-tunes/{job_id}/cancel", f"cancel {job_id}")
        return await self.get(job_id)

    async def delete(self, job_id: str) -> None:
        await self._request("DELETE", f"/fine-tunes/{job_id}", f"delete {job_id}")

    async def wait(
        self,
        job_id: str,
        *,
        poll_s: float = 2.0,
        timeout_s: float | None = None,
        on_update: Callable[[Job], None] | None = None,
    ) -> Job:
        deadline = time.monotonic() + timeout_s if timeout_s else None
        while True:
            job = await self.get(job_id)
            if on_update:
                on_update(job)
            if job.terminal:
                return job
            if deadline and time.monotonic() > deadline:
                raise OpdError(f"job {job_id} is still {job.status} after {timeout_s:.0f}s")
            await asyncio.sleep(poll_s)

    async def metrics(self, job_id: str) -> list[dict] | None:
        if self.target.kind == "cloud":
            return None
        out = _output(await self._request("GET", f"/fine-tunes/{job_id}/metrics", f"metrics of {job_id}"))
        return list(out.get("metrics") or [])

    async def checkpoints(self, job_id: str) -> list[Checkpoint] | None:
        if self.target.kind == "cloud":
            return None
        out = _output(
            await self._request("GET", f"/fine-tunes/{job_id}/checkpoints", f"checkpoints of {job_id}")
        )
        return [Checkpoint(**c) for c in out.get("checkpoints") or []]

    async def models(self) -> list[dict] | None:
        if self.target.kind == "cloud":
            return None
        return list(_output(await self._request("GET", "/models", "list models")).get("models") or [])


def _log_page(job_id: str, out: Any, offset: int) -> LogPage:
    logs = out.get("logs") if isinstance(out, dict) else None
    lines = logs.splitlines() if isinstance(logs, str) else [str(x) for x in logs or []]
    start = max(offset, 1)
    nxt = out.get("next_offset") if isinstance(out, dict) else None
    return LogPage(
        job_id=job_id,
        lines=lines,
        offset=start,
        next_offset=nxt or start + len(lines),
        total=out.get("total") if isinstance(out, dict) else None,
    )


class _SseParser:
    """Incremental server-sent-events parser (one line at a time)."""

    def __init__(self) -> None:
        self.kind, self.data, self.ident = "message", [], None

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


def _parse_sse(lines: Iterator[str]) -> Iterator[JobEvent]:
    parser = _SseParser()
    for raw in lines:
        event = parser.feed(raw)
        if event is not None:
            yield event
    event = parser.flush()
    if event is not None:
        yield event
