"""Serve the control plane in this process until Ctrl-C (`opd serve run`, ``python -m opd_nb.server``).

Startup refuses, with exit 2 and one line on stderr, before anything is bound: a non-loopback
``--host`` without a server key (it would run uploaded Python for anyone who can reach the port),
a data dir another server owns (its lock is held), a damaged database (or an empty one beside job
directories: :mod:`opd_nb.server.db_safety`), and a port that is taken.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path

from opd_nb import settings
from opd_nb.errors import OpdError
from opd_nb.loopback import binds_loopback_only, guard
from opd_nb.server.db_safety import DB_FILE, backup_database, check_database
from opd_nb.server.keys import KEY_RECIPE, key_problem
from opd_nb.server.lifecycle import owned_message
from opd_nb.server.records import (
    API_KEY_ENV,
    CHECKPOINT_TTL_ENV,
    DataDirLock,
    ServeOptions,
    ServerInfo,
    clear_owner,
    write_owner,
)

Banner = Callable[[ServerInfo], None]
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # a clean stop: exit 0, record removed


def refuse_open_bind(host: str, api_key: str | None) -> str | None:
    """The one-line refusal for a non-loopback bind without a strong server key, or None when it is fine."""
    if binds_loopback_only(host):
        return None
    if not api_key:
        return (
            f"error: --host {host} accepts connections from other machines, and this server runs "
            f"uploaded code; set a server key with {API_KEY_ENV} or --api-key-file to listen there"
        )
    weak = key_problem(api_key)
    if weak:
        return (
            f"error: --host {host} accepts connections from other machines, and {weak}; "
            f"set {API_KEY_ENV} to a random key, e.g. from {KEY_RECIPE}"
        )
    return None


def default_banner(info: ServerInfo) -> None:
    """What a background server writes to its log once it listens (the real bind address)."""
    print(bind_line(info), file=sys.stderr, flush=True)
    if not binds_loopback_only(info.host):
        print(open_warning(info.host), file=sys.stderr, flush=True)


def bind_line(info: ServerInfo) -> str:
    shown = f"[{info.host}]" if ":" in info.host else info.host
    return f"opd serve: listening on {shown}:{info.port} (pid {info.pid}, data {info.data_dir})"


def open_warning(host: str) -> str:
    return (
        f"WARNING: {host} is not a loopback address: anyone who can reach this port and has the server "
        "key can submit jobs and run uploaded code on this machine"
    )


def _bind(host: str, port: int) -> socket.socket | str:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        return (
            f"error: cannot listen on {host}:{port}: {exc.strerror} "
            "(pick another --port, or `opd serve status` to see a running server)"
        )
    return sock


def serve_forever(
    options: ServeOptions,
    *,
    ready_file: str | None = None,
    api_key: str | None = None,
    banner: Banner = default_banner,
    exit_with_parent: bool = False,
) -> int:
    """Check, lock the data dir, bind (so each refusal is a clear exit 2), then serve until stopped.

    `exit_with_parent`: stop as on SIGTERM once the process that started this one is gone, so that a
    demo or a test killed with SIGKILL leaves no control plane (and no training job) behind."""
    try:
        settings.check_environment()  # the processes it starts inherit these: each bad value is one line now
    except OpdError as exc:
        print(f"opd serve: {exc}", file=sys.stderr)
        return 2
    api_key = (
        api_key or settings.SERVE_API_KEY.pop()
    )  # in memory only: no worker or user function inherits it
    os.environ.pop(API_KEY_ENV, None)
    refusal = refuse_open_bind(options.host, api_key)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    if options.checkpoint_ttl_days is not None:  # read by the checkpoint listing
        os.environ[CHECKPOINT_TTL_ENV] = str(options.checkpoint_ttl_days)
    data_dir = options.resolved_data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    options = options.model_copy(update={"data_dir": str(data_dir)})
    lock = DataDirLock(data_dir)
    if not lock.acquire():
        print(owned_message(data_dir), file=sys.stderr)
        return 2
    if exit_with_parent:
        _stop_when_orphaned(os.getppid())
    try:
        damaged = check_database(data_dir)
        if damaged:
            print(damaged, file=sys.stderr)
            return 2
        if (data_dir / DB_FILE).exists():
            backup_database(data_dir / DB_FILE)
        sock = _bind(options.host, options.port)
        if isinstance(sock, str):
            print(sock, file=sys.stderr)
            return 2
        return _serve(sock, options, api_key, ready_file, banner)
    finally:
        clear_owner(data_dir, os.getpid())
        lock.release()


def _stop_when_orphaned(parent: int) -> None:
    """SIGTERM ourselves when reparented: uvicorn's graceful stop interrupts running jobs, which resume."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="opd-parent-watch", daemon=True).start()


def _serve(
    sock: socket.socket, options: ServeOptions, api_key: str | None, ready_file: str | None, banner: Banner
) -> int:
    import uvicorn

    from opd_nb.server.app import create_app

    sock.listen(2048)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    options = options.model_copy(update={"port": port})  # the real port: URLs handed back name it
    app = guard(create_app(options, api_key=api_key), options.host, port)  # the Host check on loopback
    info = ServerInfo.at(
        os.getpid(), options.host, port, options.resolved_data_dir(), key_required=bool(api_key)
    )
    write_owner(info)
    banner(info)
    if ready_file:
        tmp = f"{ready_file}.tmp"
        Path(tmp).write_text(str(info.port))
        os.replace(tmp, ready_file)
    from opd_nb.server.http_protocol import protocol_class

    config = uvicorn.Config(
        app, http=protocol_class(), log_level=options.log_level, access_log=False, timeout_graceful_shutdown=5
    )
    with _stop_signals_end_cleanly():
        uvicorn.Server(config).run(sockets=[sock])
    return 0


@contextlib.contextmanager
def _stop_signals_end_cleanly() -> Generator[None]:
    """A SIGTERM/SIGINT stop exits 0 after our cleanup (the owner record removed, the lock released).

    uvicorn handles the signal with a graceful stop, then raises it again with the handlers it found
    installed: with the defaults that kills the process (exit 143) before ``serve_forever``'s
    ``finally`` runs. So the handlers it finds are these no-ops: the stop has already happened."""
    if threading.current_thread() is not threading.main_thread():
        yield  # uvicorn installs no handlers off the main thread either
        return
    previous = {sig: signal.signal(sig, _already_stopped) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _already_stopped(signum: int, frame: object) -> None:
    """uvicorn's re-raise of the stop signal it just handled: nothing is left to do."""
