"""`python -m opd_nb.server`: run the control plane in the foreground (what `opd serve run` does)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path


def parse_model_map(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SystemExit(f"error: --model-map {item!r} must look like ID=PATH")
        out[key.strip()] = value.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opd_nb.server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model-map", action="append", default=[])
    parser.add_argument("--ready-file", default=None, help="write the bound port here once listening")
    parser.add_argument("--max-running", type=int, default=1)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)

    import uvicorn

    from opd_nb.server import default_data_dir
    from opd_nb.server.app import create_app

    data_dir = Path(args.data_dir).expanduser() if args.data_dir else default_data_dir()
    app = create_app(data_dir, parse_model_map(args.model_map), max_running=args.max_running)
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        print(
            f"error: cannot listen on {args.host}:{args.port}: {exc.strerror} "
            "(pick another --port, or `opd serve status` to see a running server)",
            file=sys.stderr,
        )
        return 2
    sock.listen(2048)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    if args.ready_file:
        tmp = f"{args.ready_file}.tmp"
        Path(tmp).write_text(str(port))
        os.replace(tmp, args.ready_file)
    config = uvicorn.Config(app, log_level=args.log_level, access_log=False, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
