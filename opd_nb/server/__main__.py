"""`python -m opd_nb.server`: run the control plane in the foreground (what `opd serve start` spawns)."""

from __future__ import annotations

import argparse
import os
import sys

from opd_nb.constants import LOCAL_HOST, LOCAL_PORT
from opd_nb.server.lifecycle import (
    API_KEY_ENV,
    CHECKPOINT_TTL_ENV,
    DEFAULT_MAX_DEPLOYMENTS,
    MAX_DEPLOYMENTS_ENV,
    MAX_INTERRUPTIONS,
)


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
    parser.add_argument("--host", default=LOCAL_HOST)
    parser.add_argument("--port", type=int, default=LOCAL_PORT)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model-map", action="append", default=[])
    parser.add_argument("--ready-file", default=None, help="write the bound port here once listening")
    parser.add_argument("--max-running", type=int, default=1)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"the only key the server accepts (better: {API_KEY_ENV}, which `ps` does not show)",
    )
    parser.add_argument(
        "--no-resume", action="store_true", help="fail interrupted jobs at startup instead of resuming them"
    )
    parser.add_argument("--max-interruptions", type=int, default=MAX_INTERRUPTIONS)
    parser.add_argument(
        "--max-deployments",
        type=int,
        default=None,
        help=f"how many deployments may run at once (default ${MAX_DEPLOYMENTS_ENV}, else {DEFAULT_MAX_DEPLOYMENTS})",
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop (as on SIGTERM: running jobs resume at the next start) when the process that started it is gone",
    )
    parser.add_argument(
        "--checkpoint-ttl-days",
        type=float,
        default=None,
        help=f"days a checkpoint lives before it reads EXPIRED (default ${CHECKPOINT_TTL_ENV}, else 15)",
    )
    args = parser.parse_args(argv)
    if args.checkpoint_ttl_days is not None:  # read by the checkpoint listing
        os.environ[CHECKPOINT_TTL_ENV] = str(max(0.0, args.checkpoint_ttl_days))

    from opd_nb.server.runner import serve_forever

    return serve_forever(
        args.host,
        args.port,
        args.data_dir,
        parse_model_map(args.model_map),
        max_running=args.max_running,
        ready_file=args.ready_file,
        log_level=args.log_level,
        api_key=args.api_key,
        resume=not args.no_resume,
        max_interruptions=max(1, args.max_interruptions),
        exit_with_parent=args.exit_with_parent,
        max_deployments=max(1, args.max_deployments) if args.max_deployments is not None else None,
    )


if __name__ == "__main__":
    sys.exit(main())
