"""The typed results of deployment and chat calls, whichever control plane answered.

A :class:`Deployment` is Bailian's deployment object as the wire describes it (``deployed_model``,
``status``, ``model_name``, ``capacity``, ...; :mod:`opd_nb.wire.deployments`) and a :class:`ChatReply`
reads OpenAI's ``chat.completion`` through the wire's model, as the compatible-mode API answers on
Bailian and on ``opd serve``. The notebook renders them with
``_repr_html_``, the CLI with ``__rich__`` (user text as plain text, never as rich markup).
"""

from __future__ import annotations

import html
from typing import Any

from pydantic import BaseModel, Field

from opd_nb.constants import DELETED, FAILED, PENDING, RUNNING, UNKNOWN
from opd_nb.results import ResultMixin
from opd_nb.views.terminal_table import WholeNamesTable
from opd_nb.wire.base import json_object, json_objects
from opd_nb.wire.deployments import DeploymentListing, DeploymentOutput
from opd_nb.wire.inference import ChatCompletion

_HEAD = ("deployment", "status", "model", "capacity", "created")
_COLOR = {RUNNING: "green", FAILED: "red", PENDING: "yellow", DELETED: "white"}


class Deployment(ResultMixin, DeploymentOutput):
    """A deployment as the control plane answered it, ``message`` why it FAILED (the local plane's
    ``local.message``), ``raw`` the answer as sent."""

    status: str = UNKNOWN
    message: str | None = None
    raw: dict[str, Any] = Field(default_factory=dict, repr=False)
    notes: list[str] = Field(default_factory=list)  # what the client adds (a lost answer found again)

    @classmethod
    def from_output(cls, out: Any) -> Deployment:
        out = json_object(out)
        dep = cls.model_validate({**out, "raw": out})
        if dep.local is not None and dep.local.message:
            dep.message = dep.local.message
        return dep

    @property
    def running(self) -> bool:
        return self.status == RUNNING

    def __str__(self) -> str:
        cap = f" capacity {self.capacity}" if self.capacity is not None else ""
        src = f" ({self.model_name})" if self.model_name and self.model_name != self.deployed_model else ""
        why = f": {self.message}" if self.message and self.status == FAILED else ""
        return f"{self.deployed_model} {self.status}{cap}{src}{why}"

    def _repr_html_(self) -> str:
        color = _COLOR.get(self.status, "gray")
        return (
            f"<div>deployment <code>{html.escape(self.deployed_model)}</code> "
            f"<span style='color:{color};font-weight:bold'>{html.escape(self.status)}</span>"
            f" — model <code>{html.escape(self.model_name or '')}</code>, capacity {self.capacity}"
            + (f"<br/><small>{html.escape(self.message)}</small>" if self.message else "")
            + "</div>"
        )

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(str(self), style=_COLOR.get(self.status, ""))


class DeploymentList(ResultMixin, BaseModel):
    deployments: list[Deployment]
    total: int
    page: int = 1
    size: int = 20

    @classmethod
    def from_output(cls, out: Any, *, page: int, size: int) -> DeploymentList:
        out = json_object(out)
        listing = DeploymentListing.model_validate(out)
        return cls(
            deployments=[Deployment.from_output(d) for d in json_objects(out.get("deployments"))],
            total=listing.total,
            page=page,
            size=size,
        )

    def _rows(self) -> list[tuple[str, ...]]:
        return [
            (d.deployed_model, d.status, d.model_name or "", str(d.capacity or ""), d.gmt_create or "")
            for d in self.deployments
        ]

    def __str__(self) -> str:
        return "\n".join(str(d) for d in self.deployments) or "no deployments"

    def _repr_html_(self) -> str:
        from opd_nb.views import render

        return render.box(
            render.table(list(_HEAD), self._rows()) + f"<small>{self.total} deployment(s)</small>"
        )

    def __rich__(self) -> Any:
        from rich.text import Text

        rows = [  # cells are Text: user strings are not read as rich markup
            [Text(c, style=_COLOR.get(c, "") if i == 1 else "") for i, c in enumerate(row)]
            for row in self._rows()
        ]
        title = f"{len(self.deployments)} of {self.total} deployments"
        # the deployed_model is what `opd chat`, `opd eval` and `opd undeploy` take: never cut
        return WholeNamesTable(_HEAD, rows, whole=(0,), title=title)


class ChatReply(ResultMixin, BaseModel):
    """One answer of the chat API (OpenAI's ``chat.completion``)."""

    model: str
    content: str = ""
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    usage: dict[str, Any] = Field(default_factory=dict)
    raw: dict[str, Any] = Field(default_factory=dict, repr=False, exclude=True)  # the answer as sent

    @classmethod
    def from_output(cls, out: Any, *, model: str) -> ChatReply:
        out = json_object(out)
        answer = ChatCompletion.model_validate({"model": model, **out} if not out.get("model") else out)
        choice = answer.choices[0] if answer.choices else None
        message = choice.message if choice else None
        return cls(
            model=answer.model,
            content=(message.content if message else None) or "",
            finish_reason=choice.finish_reason if choice else None,
            tool_calls=[c.wire() for c in (message.tool_calls if message else None) or []],
            usage=answer.usage.wire() if answer.usage else {},
            raw=out,
        )

    def __str__(self) -> str:
        return self.content

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.content)}</pre>"
