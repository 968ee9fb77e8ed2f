"""uvicorn's HTTP protocol, with the one answer it writes before our app runs in Bailian's error shape.

A request uvicorn's parser cannot read (a malformed request line or header, a URL longer than the
parser takes) never reaches the app: uvicorn answers a plain-text 400 itself. These subclasses keep
everything else of uvicorn's protocol and only write that 400 as ``{request_id, code, message}``.
What stays uvicorn's: the connection is closed after it (the parser's state is lost), and the
``date``/``server`` headers are uvicorn's defaults.
"""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from opd_nb.server.responses import request_id

BAD_REQUEST = "BadRequest"
UNPARSABLE = (
    "the HTTP request could not be parsed (a malformed request line or header, or a URL or header "
    "longer than the server reads); send a well-formed HTTP/1.1 request, with long data in the body"
)


def bad_request_bytes(default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The whole 400 answer, status line to body, as uvicorn writes its own (then it closes)."""
    body = json.dumps({"request_id": request_id(), "code": BAD_REQUEST, "message": UNPARSABLE}).encode()
    lines = [b"HTTP/1.1 400 Bad Request\r\n"]
    lines += [name + b": " + value + b"\r\n" for name, value in default_headers]
    lines += [
        b"content-type: application/json\r\n",
        b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
        b"connection: close\r\n\r\n",
        body,
    ]
    return b"".join(lines)


class _JsonBadRequest:
    """Overrides ``send_400_response`` of whichever uvicorn protocol it is mixed into."""

    transport: Any
    server_state: Any

    def send_400_response(self, msg: str) -> None:
        self.transport.write(bad_request_bytes(list(self.server_state.default_headers)))
        self.transport.close()


class H11JsonProtocol(_JsonBadRequest, H11Protocol):
    """uvicorn's pure-Python h11 protocol."""


def protocol_class() -> type:
    """What ``http="auto"`` would pick (httptools when installed, else h11), with the JSON 400."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is optional
        return H11JsonProtocol
    return type(
        "HttpToolsJsonProtocol",
        (_JsonBadRequest, HttpToolsProtocol),
        {"__doc__": "uvicorn's httptools protocol."},
    )
