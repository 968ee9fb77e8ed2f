"""Argument normalisation shared by the CLI and the magic before the parser sees argv.

`--local [URL]` is an option with an optional value, which Typer 0.29 no longer supports
(``is_flag=False, flag_value=...`` is deprecated and rejects a bare ``--local``). A bare ``--local``
(followed by nothing or by another word that is not a URL) gets an explicit default marker.
"""

from __future__ import annotations

LOCAL_DEFAULT = "__default_local__"
_OPTIONAL_VALUE_OPTIONS = {"--local": LOCAL_DEFAULT}


def _looks_like_url(word: str) -> bool:
    return word.startswith(("http://", "https://")) or word.split(":", 1)[0] in ("localhost", "127.0.0.1")


def normalize(argv: list[str]) -> list[str]:
    out: list[str] = []
    for i, word in enumerate(argv):
        out.append(word)
        marker = _OPTIONAL_VALUE_OPTIONS.get(word)
        if marker is not None and (i + 1 >= len(argv) or not _looks_like_url(argv[i + 1])):
            out.append(marker)
    return out
