"""User-supplied text made safe for a terminal: the one helper every CLI printer goes through.

A job name, a log line or a model's answer comes from whoever called the control plane. Printed raw,
an escape sequence in it can clear the screen, move the cursor or fake coloured text, a carriage
return can overwrite the line before it, and a bidirectional override can reorder what is shown.
:func:`printable` writes each such character as a visible escape (``\\x1b``, ``\\r``, ``\\u202e``),
and keeps newlines and tabs, which the printers' own layout needs.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls, and the Unicode format characters that steer
# layout (bidi embeddings/overrides/isolates, zero-width joiners, line and paragraph separators).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character escaped but newline and tab (a no-op on plain text)."""
    return _UNSAFE.sub(_escape, text)
