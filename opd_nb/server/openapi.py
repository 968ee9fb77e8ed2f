"""The OpenAPI document of `opd serve`, generated from its routes and their wire models.

FastAPI writes each route's body and answer from its models (:mod:`opd_nb.wire`); this adds what it
cannot see: the errors this server really sends (Bailian's error body, OpenAI's error object under
``/compatible-mode``; never FastAPI's 422), and the events of the server-sent streams. The document
is committed beside the models (:mod:`opd_nb.server.openapi_doc` writes and compares it).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from opd_nb.constants import COMPATIBLE_PATH
from opd_nb.wire.deployments import DeploymentOutput
from opd_nb.wire.envelope import ErrorBody, OpenAIError
from opd_nb.wire.inference import ChatCompletionChunk, GenerationAnswer
from opd_nb.wire.jobs import JobStatusEvent

REF = "#/components/schemas/{model}"
# The server-sent streams: each event's data (a job's `log` events carry one log line as text).
STREAMS: dict[str, type[BaseModel]] = {
    "/api/v1/fine-tunes/{job_id}/stream": JobStatusEvent,
    "/api/v1/deployments/{deployed_model}/stream": DeploymentOutput,
    "/api/v1/services/aigc/text-generation/generation": GenerationAnswer,
    f"{COMPATIBLE_PATH}/chat/completions": ChatCompletionChunk,
}


def _schemas(*models: type[BaseModel]) -> dict[str, Any]:
    """Component schemas of `models` (and of every model they use), as serialized."""
    refs, top = models_json_schema([(m, "serialization") for m in models], ref_template=REF)
    out: dict[str, Any] = dict(top.get("$defs", {}))
    for model in models:
        name = refs[(model, "serialization")]["$ref"].rsplit("/", 1)[-1]
        out.setdefault(name, model.model_json_schema(mode="serialization", ref_template=REF))
        out[name].pop("$defs", None)
    return out


def _error(description: str, schema: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(model=schema)}}},
    }


def _document_errors(path: str, op: dict[str, Any]) -> None:
    """The errors an operation can answer, in the shape this server sends them."""
    shape = "OpenAIError" if path.startswith(COMPATIBLE_PATH) else "Error"
    responses = op.setdefault("responses", {})
    responses.pop("422", None)
    responses["400"] = _error("Bad request: a parameter or the body is invalid", shape)
    if path.startswith("/api/"):
        responses["401"] = _error("Missing or wrong API key", shape)
    if "{" in path:
        responses["404"] = _error("No such resource", shape)
    if "requestBody" in op:
        responses["413"] = _error("Request body over the size cap", shape)


def _document_stream(op: dict[str, Any], event: type[BaseModel]) -> None:
    """A streaming answer: `text/event-stream`, each event's `data:` one JSON object of `event`."""
    ok = op.setdefault("responses", {}).setdefault("200", {"description": "Successful Response"})
    ok.setdefault("content", {})["text/event-stream"] = {
        "schema": {
            "type": "string",
            "description": f"server-sent events; each `data:` is a {event.__name__}",
        },
        "x-event-data": {"$ref": REF.format(model=event.__name__)},
    }


def build(app: FastAPI) -> dict[str, Any]:
    """The document of `app`'s routes, with its errors and streams."""
    from fastapi.openapi.utils import get_openapi

    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    components.update(_schemas(ErrorBody, OpenAIError, *STREAMS.values()))
    for path, ops in schema.get("paths", {}).items():
        for op in ops.values():
            _document_errors(path, op)
            if path in STREAMS:
                _document_stream(op, STREAMS[path])
    schema["components"]["schemas"] = dict(sorted(components.items()))
    return schema


def document(app: FastAPI) -> None:
    """Serve :func:`build`'s document at ``/openapi.json`` (built once)."""

    def openapi() -> dict[str, Any]:
        if not app.openapi_schema:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
