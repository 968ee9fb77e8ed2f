"""The request bodies the client sends, in Bailian's documented shapes: one model each, which the client
builds and `opd serve` validates (its route bodies in `server/bodies.py` subclass these, adding the local
plane's limits), so what is sent and what is read are written once.

A request sends only what is set, as the SDK does (no ``null`` for an option left out); keys a model does
not name go along as given (a deploy plan's fields, a chat call's sampling options).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from opd_nb.errors import OpdError


class Request(BaseModel):
    """A request body: its keys as the service documents them, extra keys kept."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    @classmethod
    def of(cls, **fields: Any) -> dict[str, Any]:
        """The body of a request with these fields; a value of the wrong kind is one `OpdError` naming
        the key, before anything is sent."""
        try:
            return cls(**fields).body()
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise OpdError(
                f"{cls.__name__} not sent: {problems}",
                fix="pass each value as the service documents it (see the call's help)",
                code="invalid-request",
            ) from None

    def body(self) -> dict[str, Any]:
        """The JSON body to send: every field that has a value."""
        return self.model_dump(mode="json", exclude_none=True)


class CancelRequest(Request):
    """A cancel's optional body (Bailian's cancel takes none; `opd serve` records ``reason``, who
    cancelled and why, in the job's message and log)."""

    reason: str | None = None


class DeploymentCreate(Request):
    """``POST /deployments`` as ``Deployments.call(model, capacity, suffix=...)`` and the v2
    ``client.deployments.create`` send it (``plan`` and the fields it needs: `wire/deploy_plans.py`)."""

    model_name: str
    capacity: StrictInt  # a count of instances: True or 2.0 is a mistake, never 1 or 2
    suffix: str | None = None
    model_version: str | None = None
    plan: str | None = None
    template_id: str | None = None
    deploy_spec: Any = None
    billing_method: Any = None


class DeploymentScale(Request):
    """``PUT /deployments/{name}/scale``."""

    capacity: StrictInt
    deployed_model: str | None = None


class ChatRequest(Request):
    """``POST /compatible-mode/v1/chat/completions``: OpenAI's chat body (sampling options as extra keys)."""

    model: str
    messages: list[dict[str, Any]]
    stream: bool = False
