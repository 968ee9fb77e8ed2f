"""The template's ``submit_job.py`` copy of the table's keys, generated from the one model.

``submit_job.py`` runs with only the SDK, so it cannot import opd-nb: it keeps the key names
(``HYPER_PARAMETERS``, ``RESOURCES``) and the defaults of the sizes a smoke run reads (``DEFAULTS``) as
literals between two marker lines. ``python -m opd_nb.workspace.template_keys`` prints the block of the
model as it is, ``--write`` rewrites the template's block, ``--check`` exits 1 when they differ (a test
runs the same comparison).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from opd_nb.spec.hyperparams import HP, RS, Written, params_in
from opd_nb.workspace.new import template_dir

BEGIN = "# <generated from opd-nb's hyper-parameter table: python -m opd_nb.workspace.template_keys --write>"
END = "# </generated>"
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
        END,
    ]
    return "\n".join(lines) + "\n"


def script() -> Path:
    """The template's ``submit_job.py``."""
    return next(template_dir().glob("*/submit_job.py"))


def committed(text: str) -> str:
    """The generated block as ``text`` (a ``submit_job.py``) holds it (marker lines included)."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end] + "\n"


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
            print(f"{path}: the generated keys differ; run python -m opd_nb.workspace.template_keys --write")
        return 0 if same else 1
    path.write_text(text.replace(committed(text), block), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
