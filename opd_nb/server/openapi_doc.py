"""The committed OpenAPI document: ``python -m opd_nb.server.openapi_doc`` prints the document of the code
as it is, ``--write`` updates the committed copy (``opd_nb/wire/openapi.json``), ``--check`` exits 1 when
they differ (a test runs the same comparison)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from fastapi import FastAPI

from opd_nb import wire
from opd_nb.server.app import create_app
from opd_nb.server.openapi import build
from opd_nb.server.records import ServeOptions

COMMITTED = Path(wire.__file__).resolve().parent / "openapi.json"


def render(app: FastAPI) -> str:
    """The document as the committed file holds it (sorted keys, two-space indent, final newline)."""
    return json.dumps(build(app), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def current() -> str:
    """The document of the code as it is now (an app over a scratch data dir; nothing starts)."""
    with tempfile.TemporaryDirectory(prefix="opd-openapi-") as tmp:
        return render(create_app(ServeOptions(data_dir=tmp)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m opd_nb.server.openapi_doc", description=(__doc__ or "").split("\n")[0]
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help=f"update the committed copy ({COMMITTED})")
    what.add_argument("--check", action="store_true", help="exit 1 when the committed copy differs")
    args = parser.parse_args(argv)
    text = current()
    if args.write:
        COMMITTED.write_text(text, encoding="utf-8")
        print(f"wrote {COMMITTED}", file=sys.stderr)
    elif args.check:
        same = COMMITTED.is_file() and COMMITTED.read_text(encoding="utf-8") == text
        if not same:
            print(
                f"{COMMITTED} differs from the code: run python -m opd_nb.server.openapi_doc --write",
                file=sys.stderr,
            )
        return 0 if same else 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
