"""A request body's ``Content-Encoding``: the one rule for what this server decodes, and how far.

Why: OTLP/HTTP exporters compress when asked (``OTEL_EXPORTER_OTLP_COMPRESSION=gzip`` or ``deflate``),
and a compressed export read as raw bytes was a 400 (gzip, deflate) or parsed as garbage (``br``): a
job's spans were lost while the job said they were traced. ``gzip`` (``x-gzip``) and ``deflate`` (zlib,
or raw deflate as some senders write it) are decoded, in the order the header lists them undone last
first; ``identity`` is nothing to undo; any other coding is a 415. Decoding streams through ``zlib``
with ``max_length``, so a body that expands past the cap stops there (a 413) whatever its ratio: a
gzip bomb costs the cap, never its expansion.
"""

from __future__ import annotations

import zlib

GZIP_CODINGS = ("gzip", "x-gzip")
DEFLATE = "deflate"
IDENTITY = "identity"
ACCEPTED = (*GZIP_CODINGS, DEFLATE)


class EncodingRefused(Exception):
    """A body this server cannot decode: (HTTP status, code, message)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def codings(header: str | None) -> list[str]:
    """The codings a ``Content-Encoding`` header names, in the order they were applied (``identity`` left out);
    a 415 for one this server does not decode."""
    names = [c.strip().lower() for c in (header or "").split(",") if c.strip()]
    unknown = [c for c in names if c != IDENTITY and c not in ACCEPTED]
    if unknown:
        raise EncodingRefused(
            415,
            "UnsupportedContentEncoding",
            f"Content-Encoding {unknown[0][:40]!r} is not supported: send the body uncompressed, or "
            f"compressed with gzip or deflate (e.g. OTEL_EXPORTER_OTLP_COMPRESSION=gzip)",
        )
    return [c for c in names if c != IDENTITY]


def decoded(body: bytes, header: str | None, cap: int) -> bytes:
    """`body` with every coding of `header` undone; over `cap` bytes at any stage is a 413, a body that
    is not what its header says a 400 (both :class:`EncodingRefused`)."""
    for coding in reversed(codings(header)):
        body = _inflate(body, coding, cap)
    return body


def _inflate(body: bytes, coding: str, cap: int) -> bytes:
    if coding == DEFLATE:
        try:  # HTTP's deflate is zlib-wrapped; some senders write it raw
            return _stream(body, zlib.MAX_WBITS, coding, cap)
        except zlib.error:
            pass
        wbits = -zlib.MAX_WBITS
    else:
        wbits = 16 + zlib.MAX_WBITS
    try:
        return _stream(body, wbits, coding, cap)
    except zlib.error as exc:
        raise EncodingRefused(
            400,
            "InvalidParameter",
            f"the body is not {coding}-compressed as its Content-Encoding says: {exc}",
        ) from None


def _stream(body: bytes, wbits: int, coding: str, cap: int) -> bytes:
    """Inflate `body` (every gzip member of it), never producing more than `cap` + 1 bytes."""
    out = bytearray()
    rest = body
    while True:
        engine = zlib.decompressobj(wbits)
        out += engine.decompress(rest, cap + 1 - len(out))  # stops at the cap, whatever the ratio
        if len(out) > cap:
            raise EncodingRefused(
                413,
                "RequestTooLarge",
                f"the {coding}-compressed body expands past the {cap / 2**20:g} MiB cap of the "
                "local control plane: send smaller batches",
            )
        if not engine.eof:
            raise zlib.error("the compressed stream is truncated")
        rest = engine.unused_data
        if not rest:
            return bytes(out)
        if wbits != 16 + zlib.MAX_WBITS:  # only gzip has further members
            raise zlib.error(f"{len(rest)} bytes follow the compressed stream")
