"""The base of every wire model, and the one way a model goes on the wire."""

from __future__ import annotations

import uuid
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue, SerializerFunctionWrapHandler, model_serializer

JsonObject = dict[str, JsonValue]  # a JSON object whose keys are data, not fields (a metric row, a spec)
Scalar = float | int | bool | str | None  # one JSON scalar (a metric's value)


def json_object(value: object) -> dict[str, Any]:
    """`value` when it is a JSON object (a parsed reply's ``output``), else an empty one: a reply out of
    shape reads as one without the keys, which the wire models then report or default."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def json_objects(value: object) -> list[dict[str, Any]]:
    """The JSON objects of `value` when it is a list (others in it skipped), else none."""
    items = cast(list[object], value) if isinstance(value, list) else []
    return [json_object(item) for item in items if isinstance(item, dict)]


def _none(value: object) -> bool:
    return value is None


def absent_when_none() -> Any:
    """A field Bailian leaves out rather than sending null (a job's ``code`` unless it failed)."""
    return Field(default=None, exclude_if=_none)


class Wire(BaseModel):
    """A JSON object of the wire. Every field is sent (null when it has no value) except those declared
    :func:`absent_when_none`; keys it does not name are kept (Bailian adds fields over time); fields are
    filled by name or by their wire alias."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def wire(self) -> dict[str, Any]:
        """This object as the routes send it (JSON types, wire names)."""
        return self.model_dump(mode="json", by_alias=True)

    def wire_json(self) -> str:
        """:meth:`wire` as JSON text (non-ASCII kept as is)."""
        return self.model_dump_json(by_alias=True)


class Forwarded(Wire):
    """An object this server passes on from another process (a serving process's answer, the engine's
    rollout files): typed where it names a key, and sent with exactly the keys it arrived with (or was
    built with), however it is serialized."""

    @model_serializer(mode="wrap")
    def _as_received(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        names = {n: f.serialization_alias or f.alias or n for n, f in type(self).model_fields.items()}
        unset = {key for n, key in names.items() if n not in self.model_fields_set}
        return {k: v for k, v in data.items() if k not in unset}  # keys it does not name are kept


def new_request_id() -> str:
    """A request id as Bailian sends them (a UUID4)."""
    return str(uuid.uuid4())
