"""The typed results of job calls: what both clients return, whichever control plane answered.

A result is read from the service's ``output`` through the wire model both control planes answer with
(:mod:`opd_nb.wire`): a :class:`Job` *is* the wire's job object, with its presentation added, so the
server's shape and the client's reading cannot drift. The notebook renders them with ``_repr_html_``,
the CLI with ``__rich__``.
"""

from __future__ import annotations

import html
import json
import time
from typing import Any, cast

from pydantic import BaseModel, Field, computed_field, model_validator

from opd_nb.constants import CANCELED, FAILED, PENDING, RUNNING, SUCCEEDED, TERMINAL_STATUSES
from opd_nb.results import ResultMixin
from opd_nb.views.terminal_table import WholeNamesTable
from opd_nb.wire.base import json_object, json_objects
from opd_nb.wire.checkpoints import CheckpointEntry
from opd_nb.wire.jobs import JobListing, JobLogs, JobOutput

_STATUS_COLOR = {
    SUCCEEDED: "green",
    FAILED: "red",
    CANCELED: "yellow",
    RUNNING: "cyan",
    PENDING: "white",
}


class Job(ResultMixin, JobOutput):
    """A job as the control plane answered it (the wire's job object), ``raw`` the answer as sent."""

    raw: dict[str, Any] = Field(default_factory=dict, repr=False)

    @classmethod
    def from_output(cls, out: dict[str, Any]) -> Job:
        return cls.model_validate({**out, "raw": out})

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def functions(self) -> list[dict[str, Any]]:
        """The registered functions the job runs, as the wire has them (`name`, `type`, `entity_id`; local
        control plane; empty where the service does not list them)."""
        return [f.wire() for f in self.local.functions] if self.local is not None else []

    def summary(self) -> str:
        prog = ""
        if self.progress and self.progress.total_steps:
            prog = f" step {self.progress.step}/{self.progress.total_steps}"
        extra = f" -> {self.finetuned_output}" if self.finetuned_output else ""
        msg = f" ({self.message})" if self.message and self.status == FAILED else ""
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
        if self.progress and self.progress.total_steps:
            rows.append(("progress", f"{self.progress.step}/{self.progress.total_steps} steps"))
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

    @classmethod
    def from_output(cls, out: Any, *, page: int, size: int) -> JobList:
        out = json_object(out)
        listing = JobListing.model_validate(out)
        jobs = [Job.from_output(raw) for raw in json_objects(out.get("jobs"))]
        return cls(jobs=jobs, total=listing.total or 0, page=page, size=size)

    def _repr_html_(self) -> str:
        head = "<tr><th>job</th><th>status</th><th>model</th><th>created</th><th>output</th></tr>"
        rows = "".join(
            f"<tr><td>{html.escape(j.job_id)}</td><td>{html.escape(j.status)}</td><td>{html.escape(j.model or '')}"
            f"</td><td>{html.escape(j.create_time or '')}</td><td>{html.escape(j.finetuned_output or '')}</td></tr>"
            for j in self.jobs
        )
        return f"<table>{head}{rows}</table><small>{len(self.jobs)} of {self.total} jobs</small>"

    def __rich__(self) -> Any:
        from rich.text import Text

        rows = [  # cells are Text: user strings are not read as rich markup
            [
                Text(j.job_id),
                Text(j.status, style=_STATUS_COLOR.get(j.status, "")),
                Text(j.model or ""),
                Text(j.create_time or ""),
                Text(j.finetuned_output or ""),
            ]
            for j in self.jobs
        ]
        # the job id and its output (what to deploy or continue from) print whole, to be copied
        title = f"{len(self.jobs)} of {self.total} jobs"
        return WholeNamesTable(
            ("job", "status", "model", "created", "output"), rows, whole=(0, 4), title=title
        )

    def __str__(self) -> str:
        return "\n".join(j.summary() for j in self.jobs) or "no jobs"


class LogPage(ResultMixin, BaseModel):
    job_id: str
    lines: list[str]
    offset: int
    next_offset: int
    total: int | None = None

    @classmethod
    def from_output(cls, job_id: str, out: Any, *, offset: int) -> LogPage:
        """Bailian sends ``logs`` as one string, the local server as a list; both become lines."""
        page = JobLogs.model_validate(out if isinstance(out, dict) else {})
        logs = page.logs
        lines = logs.splitlines() if isinstance(logs, str) else [str(x) for x in logs]
        start = max(offset, 1)
        return cls(
            job_id=job_id,
            lines=lines,
            offset=start,
            next_offset=page.next_offset or start + len(lines),
            total=page.total,
        )

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"


class JobEvent(ResultMixin, BaseModel):
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


# An older local server's flat entry, and the names callers build a checkpoint by: each key's place on the wire.
_FLAT_KEYS = {"name": "checkpoint", "created_at": "create_time", "display_name": "model_display_name"}
_FLAT_LOCAL = ("path", "metrics", "published")


class Checkpoint(ResultMixin, CheckpointEntry):
    """One kept checkpoint: the wire's "list checkpoints" entry itself (local extras under ``local``), so
    the server's shape and the client's reading cannot drift; the names the front ends read it by
    (``name``, ``path``, ``metrics``, …) are views of those fields, never copies (and are in its JSON,
    as `--json` has always given them)."""

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        """Read the flat keys (an older local server's ``name``/``path``/``created_at``/…) into the wire's."""
        if not isinstance(data, dict):
            return data
        given = cast(dict[str, Any], data)
        if not ({*_FLAT_KEYS, *_FLAT_LOCAL} & given.keys()):
            return given
        entry = {k: v for k, v in given.items() if k not in _FLAT_KEYS and k not in _FLAT_LOCAL}
        for flat, key in _FLAT_KEYS.items():
            if entry.get(key) is None and given.get(flat) is not None:
                entry[key] = given[flat]
        if entry.get("local") is None and any(given.get(k) for k in _FLAT_LOCAL):
            entry["local"] = {"path": given.get("path") or "", "metrics": given.get("metrics") or {},
                              "published": bool(given.get("published"))}  # fmt: skip
        return entry

    @computed_field
    @property
    def name(self) -> str:
        """``checkpoint-{step}`` (or ``final``): what `opd export` and the tables name it by."""
        return self.checkpoint or self.full_name or ""

    @computed_field
    @property
    def path(self) -> str | None:
        """Local control plane: where it is on disk (deployable by this path)."""
        return (self.local.path or None) if self.local is not None else None

    @computed_field
    @property
    def created_at(self) -> str | None:
        return self.create_time

    @computed_field
    @property
    def metrics(self) -> dict[str, Any]:
        """The metrics of its step (local control plane; empty where the plane gives none)."""
        return dict(self.local.metrics) if self.local is not None else {}

    @computed_field
    @property
    def published(self) -> bool:
        """Whether it is the job's published ``finetuned_output`` (local control plane)."""
        return self.local.published if self.local is not None else False

    @computed_field
    @property
    def display_name(self) -> str | None:
        """The export's ``--model-name`` (Bailian's ``model_display_name``): a label, never what to deploy."""
        return self.model_display_name

    def expires_in_days(self, now: float | None = None) -> float | None:
        """Days until ``expire_time`` (negative: expired), None where the plane gives none."""
        try:
            end = time.mktime(time.strptime(self.expire_time or "", "%Y-%m-%d %H:%M:%S"))
        except ValueError:
            return None
        return (end - (time.time() if now is None else now)) / 86400

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> Checkpoint:
        """Read from Bailian's entry (an older local server's flat ``name``/``path``/``created_at`` too)."""
        return cls.model_validate(entry)

    @classmethod
    def listing(cls, out: Any) -> list[Checkpoint]:
        """``output``: Bailian's list of checkpoints (an older local server's ``{"checkpoints": [...]}`` too)."""
        entries: object = json_object(out).get("checkpoints", out)  # a list: json_object(list) is {}
        return [cls.from_entry(e) for e in json_objects(entries)]
