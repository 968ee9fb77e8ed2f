"""Every failure an agent meets, as one line with its fix (the CLI's way), never an echo of its input.

Three kinds reach a tool's caller or a resource's reader: arguments that fail the input schema (the
SDK's pydantic dump, with a link, becomes one line per argument naming its rule and the size or type
that was sent, not the value); our own refusals (an :class:`~opd_nb.errors.OpdError`: its line, cut to
:data:`MAX_ERROR_CHARS`); and a crash (anything else: one line saying so, and on the server's log one
line with the exception's type and where it was raised, never its message, which may quote an
argument).
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from pydantic import ValidationError

MAX_ERROR_CHARS = 600  # an error line an agent reads; a longer one is cut (it may quote an input)
SCHEMA_FIX = "send the argument as the tool's input schema says (tools/list)"
log = logging.getLogger("opd_nb.agent")


def cap(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text` on one line, at most `limit` characters (the cut says how much was left out)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return f"{flat[: limit - 40]}… ({len(flat) - limit + 40:,} more characters)"


def _sent(value: Any) -> str:
    """What was sent, by size and type only (never the value: it may be a megabyte, or a secret)."""
    if isinstance(value, str):
        return f"a string of {len(value):,} characters"
    if isinstance(value, list | dict):
        return f"a {'list' if isinstance(value, list) else 'object'} of {len(value):,} items"  # pyright: ignore[reportUnknownArgumentType]
    kind = {bool: "boolean", int: "integer", float: "number", type(None): "null"}.get(type(value), "value")
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def validation_line(name: str, exc: ValidationError) -> str:
    """`name`'s rejected arguments as one line: where, the rule, what was sent (its size/type), the fix."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        rule = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {rule} (sent {_sent(err.get('input'))})")
    more = exc.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return cap(f"{name}: " + "; ".join(parts) + f" (fix: {SCHEMA_FIX})")


def crash_line(name: str, exc: BaseException) -> str:
    """A crash of `name`: one line for the caller; the log gets the type and the raising frame only."""
    cause = exc.__cause__ or exc
    frames = traceback.extract_tb(cause.__traceback__)
    at = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    log.warning("%s raised %s at %s", name, type(cause).__name__, at)
    return (
        f"{name}: failed inside opd-nb ({type(cause).__name__}) (fix: check the arguments against the "
        "tool's description; if they are right, report it with `opd --version`)"
    )
