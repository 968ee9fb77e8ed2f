"""Argument normalisation shared by the CLI and the magic before the parser sees argv.

`--local [URL]` and `--smoke [N]` are options with an optional value, which Typer 0.29 no longer supports
(``is_flag=False, flag_value=...`` is deprecated and rejects a bare ``--local``). A bare ``--local``
(followed by nothing or by another word that is not a URL), or a bare ``--smoke`` (not followed by a
number), gets an explicit default marker.
"""

from __future__ import annotations

from collections.abc import Callable

LOCAL_DEFAULT = "__default_local__"
SMOKE_DEFAULT = "0"  # `--smoke` without N: the default smoke size (opd_nb.paid.estimate.smoke_rows)


def _looks_like_url(word: str) -> bool:
    return word.startswith(("http://", "https://")) or word.split(":", 1)[0] in ("localhost", "127.0.0.1")


# option -> (the marker a bare option gets, whether the next word is its value)
_OPTIONAL_VALUE_OPTIONS: dict[str, tuple[str, Callable[[str], bool]]] = {
    "--local": (LOCAL_DEFAULT, _looks_like_url),
    "--smoke": (SMOKE_DEFAULT, str.isdigit),
}


def normalize(argv: list[str]) -> list[str]:
    out: list[str] = []
    for i, word in enumerate(argv):
        out.append(word)
        option = _OPTIONAL_VALUE_OPTIONS.get(word)
        if option is not None and (i + 1 >= len(argv) or not option[1](argv[i + 1])):
            out.append(option[0])
    return out
