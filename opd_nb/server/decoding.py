"""The one body decoder: what every non-multipart request body must be before any route reads it.

Why one place: the checks used to run only for ``Content-Type: application/json``, but the OpenAI
chat route reads any body as JSON, and ``json.loads`` also reads UTF-16 and UTF-32. So a body sent
as ``text/plain``, or in another UTF encoding, skipped the depth and surrogate checks and reached a
500. :func:`body_problem` runs for every body, whatever its content type, and refuses (as a 400 that
says how to fix it) JSON that is not UTF-8, nested too deep, holds a lone surrogate, a non-finite
number (``NaN``, ``Infinity``: not JSON, and no reply can carry them) or an integer beyond 64 bits.
Malformed JSON, and a body that is not JSON at all, is the route's to report.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import JsonValue

MAX_JSON_DEPTH = 64  # nesting levels of a JSON body
MAX_JSON_INT = 2**63 - 1  # no field of any body means more: SQLite, numpy and torch stop at 64 bits
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SUSPECT = re.compile(rb"NaN|Infinity|\d{19}")  # a non-finite constant, or an integer of 19+ digits
_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32",
    b"\x00\x00\xfe\xff": "UTF-32",
    b"\xff\xfe": "UTF-16",
    b"\xfe\xff": "UTF-16",
}


def has_surrogate(text: str) -> bool:
    """A lone UTF-16 surrogate: Python accepts it in a str, but no UTF-8 writer does."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def body_problem(body: bytes) -> str | None:
    """Why a request body is refused, or None (also for a body that is not JSON: the route says so)."""
    encoding = _other_encoding(body)
    if encoding:
        return (
            f"the request body is {encoding}-encoded; JSON bodies must be UTF-8 (RFC 8259): "
            "re-encode it as UTF-8"
        )
    nested = body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH
    if not nested and _SURROGATE_ESCAPE.search(body) is None and _SUSPECT.search(body) is None:
        return None  # the common case: nothing to parse twice
    try:
        value = json.loads(body)  # NaN and Infinity decode as floats: the walk names their field
    except RecursionError:
        return f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep"
    except ValueError:
        return None
    return _walk(value)


def _other_encoding(body: bytes) -> str | None:
    """UTF-16 or UTF-32 by BOM, or by the NUL bytes an ASCII first character leaves (RFC 4627), if it decodes so."""
    for bom, name in _BOMS.items():
        if body.startswith(bom):
            return name
    head = body[:4]
    if len(head) == 4 and (head[:3] == b"\x00\x00\x00" or head[1:] == b"\x00\x00\x00"):
        name, codec = "UTF-32", "utf-32-be" if head[0] == 0 else "utf-32-le"
    elif len(head) >= 2 and (head[0] == 0) != (head[1] == 0):
        name, codec = "UTF-16", "utf-16-be" if head[0] == 0 else "utf-16-le"
    else:
        return None
    try:
        body.decode(codec, "surrogatepass")
    except UnicodeDecodeError:
        return None  # bytes with a NUL, not text: the route reports a body that is not JSON
    return name


def _walk(value: JsonValue) -> str | None:
    stack: list[tuple[JsonValue, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, where = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep"
        if isinstance(item, dict):
            for key, inner in item.items():
                if has_surrogate(key):
                    return _surrogate_message()
                stack.append((inner, depth + 1, f"{where}.{key}" if where else key))
        elif isinstance(item, list):
            stack.extend((inner, depth + 1, f"{where}[{i}]") for i, inner in enumerate(item))
        elif isinstance(item, str) and has_surrogate(item):
            return _surrogate_message()
        elif problem := number_problem(item, where or "the body"):
            return problem
    return None


def number_problem(value: Any, where: str) -> str | None:
    """Why a decoded number cannot be used anywhere (non-finite, or an integer beyond 64 bits), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return (
            f"{where} is {value!r}, which is not a JSON number (NaN and Infinity are not finite); "
            "send a finite number, or leave the field out"
        )
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_JSON_INT:
        return (
            f"{where} is an integer of {len(str(abs(value)))} digits, beyond any range this API "
            f"accepts (|n| <= 2**63 - 1); send a smaller number"
        )
    return None


def _surrogate_message() -> str:
    return (
        "the JSON body holds a lone UTF-16 surrogate (an escape in \\ud800-\\udfff without its pair), "
        "which is not text; send valid UTF-8"
    )
