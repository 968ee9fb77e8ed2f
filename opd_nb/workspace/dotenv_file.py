"""A `.env` file, read by one grammar everywhere: python-dotenv's.

Why: the key a user writes in `.env` must be the key every path sends. The client (`opd`), the
preflight rules (`opd check`) and the workspace's `submit_job.py` all read `.env` with python-dotenv's
parser (quotes, `export`, inline comments, spaces, empty values, CRLF, `${VAR}` expansion), so
``DASHSCOPE_API_KEY='sk-…' # my key`` is ``sk-…`` on every path. The template's `submit_job.py` keeps
its own copy of this reader (it must run without opd-nb); a shared corpus test keeps both equal.

A line python-dotenv cannot read, and a line with a name but no ``=`` (a pasted key, say), set
nothing: they are returned as problems with their line numbers, never with their text (it may hold
a key). `submit_job.py` refuses such a file; `opd check` names each line.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import NamedTuple

UNPARSABLE = "python-dotenv cannot read the statement that starts here (an unclosed quote, a space in the name, text after a closing quote?)"
NO_VALUE = "a name with no `=`: it sets nothing (a pasted key without its variable name?)"


class DotenvProblem(NamedTuple):
    line: int  # 1-based line where the statement starts
    reason: str  # UNPARSABLE or NO_VALUE


class DotenvFile(NamedTuple):
    values: dict[str, str]  # what the file sets, in python-dotenv's reading
    lines: dict[str, int]  # the line that sets each name (the last one, which wins)
    problems: list[DotenvProblem]


def parse_dotenv(text: str) -> DotenvFile:
    """The values and problems of `.env` text, as python-dotenv reads it (values as ``dotenv_values``)."""
    from dotenv.main import resolve_variables
    from dotenv.parser import parse_stream

    bindings = list(parse_stream(io.StringIO(text)))
    problems = [
        DotenvProblem(b.original.line, UNPARSABLE if b.error else NO_VALUE)
        for b in bindings
        if b.error or (b.key is not None and b.value is None)
    ]
    resolved = resolve_variables(((b.key, b.value) for b in bindings if b.key is not None), override=True)
    values = {k: v for k, v in resolved.items() if v is not None}
    lines = {b.key: b.original.line for b in bindings if b.key is not None and b.value is not None}
    return DotenvFile(values, lines, problems)


def read_dotenv(path: str | Path) -> DotenvFile:
    """`path` read as UTF-8 with universal newlines (CRLF too); a missing file sets nothing.

    A file that is not UTF-8 is one problem at line 1 (its values are not guessed)."""
    p = Path(path)
    if not p.is_file():
        return DotenvFile({}, {}, [])
    try:
        with open(p, encoding="utf-8") as fh:  # text mode: \r\n and \r become \n, as python-dotenv reads
            text = fh.read()
    except UnicodeDecodeError:
        return DotenvFile({}, {}, [DotenvProblem(1, "not UTF-8 text")])
    except OSError:
        return DotenvFile({}, {}, [DotenvProblem(1, "cannot be read")])
    return parse_dotenv(text)
