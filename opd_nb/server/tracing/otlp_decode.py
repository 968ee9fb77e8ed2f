"""OTLP/HTTP trace bodies (protobuf or JSON) as :class:`~opd_nb.traces.spans.Span` records.

The function servers' exporter posts ``ExportTraceServiceRequest`` as protobuf; OTLP/HTTP also allows
JSON, whose ids are hex (not protobuf JSON's base64), so they are turned into base64 before
``json_format`` reads the rest. Whatever cannot be read is an :class:`OtlpError` (a 400, never a 500);
a span with malformed ids is left out and counted, as OTLP's partial success allows.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from opd_nb.traces.spans import Span, SpanEvent, Status, logical_kind

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_STATUS: dict[int, Status] = {0: "unset", 1: "ok", 2: "error"}
_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
MAX_ATTRIBUTE_DEPTH = 8


class OtlpError(ValueError):
    """A body that is not an OTLP trace export (the words say what is wrong)."""


@dataclass
class Decoded:
    spans: list[Span] = field(default_factory=list[Span])
    rejected: int = 0  # spans left out (malformed ids)
    reason: str = ""


def media_type(content_type: str | None) -> str:
    """``application/x-protobuf`` or ``application/json`` (what OTLP/HTTP allows), else an :class:`OtlpError`."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind in (PROTOBUF, JSON):
        return kind
    raise OtlpError(
        f"Content-Type {content_type or '(none)'!r} is not an OTLP/HTTP encoding: send {PROTOBUF} or {JSON}"
    )


def decode(body: bytes, content_type: str | None) -> Decoded:
    """The spans in one export request."""
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    kind = media_type(content_type)
    request = ExportTraceServiceRequest()
    try:
        if kind == PROTOBUF:
            request.ParseFromString(body)
        else:
            document = _ids_as_base64(_json(body))  # an object stays an object
            json_format.ParseDict(
                document if isinstance(document, dict) else {}, request, ignore_unknown_fields=True
            )
    except (DecodeError, json_format.ParseError, RecursionError, ValueError, TypeError) as exc:
        what = "protobuf" if kind == PROTOBUF else "OTLP JSON"
        raise OtlpError(f"the body is not an OTLP trace export in {what}: {exc}") from None
    return _spans(request)


def response_body(decoded: Decoded, content_type: str) -> bytes:
    """``ExportTraceServiceResponse`` (with ``partial_success`` when spans were left out), encoded as asked."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    reply = ExportTraceServiceResponse()
    if decoded.rejected:
        reply.partial_success.rejected_spans = decoded.rejected
        reply.partial_success.error_message = decoded.reason
    if content_type == JSON:
        return json.dumps(json_format.MessageToDict(reply)).encode()
    return reply.SerializeToString()


def _json(body: bytes) -> dict[str, JsonValue]:
    try:
        value: JsonValue = json.loads(body)
    except ValueError as exc:
        raise OtlpError(f"the body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise OtlpError("an OTLP JSON body is an object with resourceSpans")
    return value


def _ids_as_base64(value: JsonValue) -> JsonValue:
    """OTLP JSON's hex ids in protobuf JSON's base64 (json_format reads bytes as base64)."""
    if isinstance(value, dict):
        out: dict[str, JsonValue] = {}
        for key, inner in value.items():
            if key in _ID_KEYS and isinstance(inner, str):
                try:
                    inner = base64.b64encode(bytes.fromhex(inner)).decode()
                except ValueError:
                    raise OtlpError(f"{key} {inner[:40]!r} is not hex (OTLP JSON ids are hex)") from None
            out[key] = _ids_as_base64(inner)
        return out
    if isinstance(value, list):
        return [_ids_as_base64(v) for v in value]
    return value


def _spans(request: Any) -> Decoded:
    out = Decoded()
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
        service = str(resource.get("service.name") or "")
        for ss in rs.scope_spans:
            for s in ss.spans:
                span = _span(s, service)
                if span is None:
                    out.rejected += 1
                    out.reason = "a span's trace_id must be 16 bytes and its span_id 8 (not all zero)"
                else:
                    out.spans.append(span)
    return out


def _span(s: Any, service: str) -> Span | None:
    if len(s.trace_id) != 16 or len(s.span_id) != 8 or not any(s.trace_id) or not any(s.span_id):
        return None
    attributes = _attributes(s.attributes)
    start, end = s.start_time_unix_nano, max(s.end_time_unix_nano, s.start_time_unix_nano)
    parent = binascii.hexlify(s.parent_span_id).decode() if len(s.parent_span_id) == 8 else None
    return Span(
        trace_id=binascii.hexlify(s.trace_id).decode(),
        span_id=binascii.hexlify(s.span_id).decode(),
        parent_id=parent,
        name=s.name,
        kind=logical_kind(attributes, s.name),
        start_ms=start / 1e6,
        duration_ms=(end - start) / 1e6,
        status=_STATUS.get(s.status.code, "unset"),
        status_message=s.status.message,
        attributes=attributes,
        events=[
            SpanEvent(name=e.name, time_ms=e.time_unix_nano / 1e6, attributes=_attributes(e.attributes))
            for e in s.events
        ],
        service=service,
    )


def _attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in pairs:  # most values are strings: read without a call (the intake's hot loop)
        v = kv.value
        out[kv.key] = v.string_value if v.WhichOneof("value") == "string_value" else _value(v, 0)
    return out


def _value(v: Any, depth: int) -> Any:
    which = v.WhichOneof("value")
    if which is None or depth > MAX_ATTRIBUTE_DEPTH:
        return None
    if which == "array_value":
        return [_value(x, depth + 1) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value, depth + 1) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    if which == "int_value":
        return int(v.int_value)
    if which == "double_value" and not math.isfinite(v.double_value):
        return str(v.double_value)  # NaN and Infinity are no JSON numbers: kept as their words
    return getattr(v, which)
