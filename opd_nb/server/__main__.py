"""`python -m opd_nb.server`: run the control plane in the foreground (what `opd serve start` spawns).

The launcher passes its :class:`~opd_nb.server.records.ServeOptions` whole, as JSON in ``--options``;
a person may instead (or on top) give any single-valued option as a flag of the same name
(``--port 0 --data-dir d``), so a new option needs no code here. The model map comes only in
``--options``: `opd serve --model-map` is the one place that parses ``ID=PATH``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

from pydantic import ValidationError

from opd_nb import settings
from opd_nb.errors import OpdError
from opd_nb.server.records import API_KEY_ENV, ServeOptions

_STRUCTURED = ("model_map",)  # options that have no single-value flag


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m opd_nb.server")
    parser.add_argument(
        "--options", default="{}", help="the ServeOptions as JSON (what opd_nb.server.start passes)"
    )
    for name, field in ServeOptions.model_fields.items():
        if name not in _STRUCTURED:
            parser.add_argument(
                f"--{name.replace('_', '-')}", dest=name, default=None, help=f"default {field.default}"
            )
    parser.add_argument("--ready-file", default=None, help="write the bound port here once listening")
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"the only key the server accepts (better: {API_KEY_ENV} or --api-key-file, which `ps` does not show)",
    )
    parser.add_argument("--api-key-file", default=None, metavar="PATH", help="a file holding the server key")
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop (as on SIGTERM: running jobs resume at the next start) when the process that started it is gone",
    )
    return parser


def options_from(args: argparse.Namespace) -> ServeOptions:
    """``--options`` with the single-option flags on top; a bad value is one line and exit 2."""
    flags = {
        name: value for name in ServeOptions.model_fields if (value := getattr(args, name, None)) is not None
    }
    try:
        given = json.loads(args.options)
    except ValueError as exc:
        _refuse(f"--options is not JSON ({exc})")
    if not isinstance(given, dict):
        _refuse("--options must be a JSON object")
    try:
        return ServeOptions.model_validate({**given, **flags})
    except ValidationError as exc:
        _refuse(
            "; ".join(f"--{'.'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}" for e in exc.errors())
        )


def _refuse(problem: str) -> NoReturn:
    print(f"error: bad server options: {problem}", file=sys.stderr)
    raise SystemExit(2)


def _api_key(args: argparse.Namespace) -> str | None:
    """The key from ``--api-key-file``, else ``--api-key`` (with the warning that `ps` shows it)."""
    if args.api_key_file:
        try:
            return settings.read_secret_file(args.api_key_file, "--api-key-file")
        except OpdError as exc:
            _refuse(str(exc))
    if args.api_key:
        print(settings.on_command_line("--api-key", API_KEY_ENV, "--api-key-file"), file=sys.stderr)
    return args.api_key


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    options = options_from(args)
    api_key = _api_key(args)

    from opd_nb.server.runner import serve_forever

    return serve_forever(
        options, ready_file=args.ready_file, api_key=api_key, exit_with_parent=args.exit_with_parent
    )


if __name__ == "__main__":
    sys.exit(main())
