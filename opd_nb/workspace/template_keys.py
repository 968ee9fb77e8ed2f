"""The facts the template's ``submit_job.py`` shares with the package, generated from their one source.

``submit_job.py`` runs with only the SDK, so it cannot import opd-nb: it keeps the key names
(``HYPER_PARAMETERS``, ``RESOURCES``), the defaults of the sizes a smoke run reads (``DEFAULTS``), the
version of the result it writes, the default URLs, the terminal statuses, the entity state's names, the
SDK's zip facts, the smoke sizes and a paid start's request id format as literals between two marker lines (the constants' source is
:mod:`opd_nb.constants`, the keys' :mod:`opd_nb.spec.hyperparams`). ``python -m opd_nb.workspace.template_keys`` prints the block of the
model as it is, ``--write`` rewrites the template's block, ``--check`` exits 1 when they differ (a test
runs the same comparison).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from opd_nb import constants as c
from opd_nb.spec.hyperparams import HP, RS, Written, params_in
from opd_nb.workspace.new import template_dir

BEGIN = "# <generated from opd-nb's table and constants: python -m opd_nb.workspace.template_keys --write>"
END = "# </generated>"
BEGIN_MARK = "# <generated from opd-nb"  # how any version of the opening marker starts
SMOKE_SIZES = ("batch_size", "n_epochs", "n_rollouts")  # what submit_job.py's smoke run sizes itself by
WIDTH = 110


def _wrapped(name: str, items: Iterable[str], close: str) -> list[str]:
    """``NAME = (item, item, ...)`` packed into lines of at most WIDTH, continued under the first item."""
    head, lines = f"{name} = (", []
    line = head
    for item in items:
        piece = f"{item}, "
        if len(line) + len(piece.rstrip()) > WIDTH and line.strip() != head.strip():
            lines.append(line.rstrip())
            line = " " * len(head)
        line += piece
    lines.append(line.rstrip().removesuffix(",") + close)
    return lines


def render() -> str:
    """The generated block of the model as it is (marker lines included, final newline)."""
    left_out = Written({})  # what a config that leaves the key out gets
    defaults = ", ".join(f'"{name}": {left_out.get(name)!r}' for name in SMOKE_SIZES)
    lines = [
        BEGIN,
        *_wrapped("HYPER_PARAMETERS", (f'"{p.name}"' for p in params_in(HP)), ")"),
        *_wrapped("RESOURCES", (f'"{p.name}"' for p in params_in(RS)), ")"),
        f"DEFAULTS = {{{defaults}}}  # the service's, when the config leaves them out",
        *_facts(),
        END,
    ]
    return "\n".join(lines) + "\n"


def _facts() -> list[str]:
    """The constants the script shares with the package, one assignment each (long strings split)."""
    terminal = (c.SUCCEEDED, c.FAILED, c.CANCELED)
    pairs: list[tuple[str, object]] = [
        ("RESULT_PROTOCOL", c.SUBMIT_RESULT_PROTOCOL),
        ("LOCAL_URL", c.DEFAULT_LOCAL_API),
        ("CLOUD_URL", c.DEFAULT_CLOUD_API),
        ("TERMINAL", terminal),
        ("STATE_DIR", c.ENTITY_STATE_DIR),
        ("STATE_FILE", c.ENTITY_STATE_FILE),
        ("GENERATED_FILES", c.SDK_GENERATED_FILES),
        ("START_SCRIPT_ENV", c.SDK_START_SCRIPT_ENV),
        ("SMOKE_STEPS", c.SMOKE_STEPS),
        ("SMOKE_VALIDATION_ROWS", c.SMOKE_VALIDATION_ROWS),
        ("SMOKE_SUFFIX", c.SMOKE_SUFFIX),
        ("REQUEST_ID_PREFIX", c.REQUEST_ID_PREFIX),
        ("REQUEST_ID_HEX", c.REQUEST_ID_HEX),
    ]
    lines = [f"{name} = {_literal(value)}" for name, value in pairs]
    for name, text in (("ZIP_EXCLUDES", c.WORKSPACE_ZIP_EXCLUDES), ("STATE_NOTE", c.ENTITY_STATE_NOTE)):
        lines += _split_string(name, text)
    return lines


def _literal(value: object) -> str:
    """A Python literal in the script's style: double-quoted strings, tuples with their comma."""
    if isinstance(value, tuple):
        items = ", ".join(_literal(v) for v in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _split_string(name: str, text: str) -> list[str]:
    """``NAME = ("...", "...")``: a long string as adjacent literals of at most WIDTH per line."""
    head = f"{name} = ("
    room = WIDTH - len(head) - 3
    pieces = [text[i : i + room] for i in range(0, len(text), room)] or [""]
    out = [f"{head}{_literal(pieces[0])}"] + [" " * len(head) + _literal(p) for p in pieces[1:]]
    out[-1] += ")"
    return out


def script() -> Path:
    """The template's ``submit_job.py``."""
    return next(template_dir().glob("*/submit_job.py"))


def committed(text: str) -> str:
    """The generated block as ``text`` (a ``submit_job.py``) holds it (marker lines included; whatever its
    opening marker's wording), or '' when it has none."""
    start = text.find(BEGIN_MARK)
    end = text.find(END, start)
    if start < 0 or end < 0:
        return ""
    return text[start : end + len(END)] + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m opd_nb.workspace.template_keys", description=(__doc__ or "").split("\n")[0]
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help="update the template's submit_job.py")
    what.add_argument("--check", action="store_true", help="exit 1 when the template's copy differs")
    args = parser.parse_args(argv)
    block = render()
    if not (args.write or args.check):
        sys.stdout.write(block)
        return 0
    path = script()
    text = path.read_text(encoding="utf-8")
    if args.check:
        same = committed(text) == block
        if not same:
            print(f"{path}: the generated facts differ; run python -m opd_nb.workspace.template_keys --write")
        return 0 if same else 1
    old = committed(text)
    if not old:
        print(
            f"{path}: no generated block (a line starting {BEGIN_MARK!r} ... {END!r}); add the two marker lines"
        )
        return 1
    path.write_text(text.replace(old, block), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
