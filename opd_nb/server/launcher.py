"""How the control plane starts a worker or a serving process: forked from the fork server when it can.

The managers call :meth:`Launcher.start` and get a process handle (``pid``, ``returncode``,
``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``): a :class:`ForkedProcess` from
:mod:`opd_nb.server.forkserver`, or a plain ``subprocess.Popen`` where forking is off
(``OPD_FORKSERVER=0``, or not Linux), where the fork server is still importing and the caller
cannot wait (a deployment is created inside a request), or where it failed (one line in the
server's log says why). Both run the same ``python -m MODULE ARGS`` with the same environment,
session, log and process-tree tag, so nothing downstream knows which it got.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Protocol

from opd_nb import settings
from opd_nb.server import process_tree
from opd_nb.server.fork_protocol import REPLY, Exited, Ready, Spawned, SpawnFailed, SpawnRequest

FORKSERVER_MODULE = "opd_nb.server.forkserver"
FORKSERVER_OWNER = "forkserver"
ENABLED_ENV = settings.FORKSERVER.name  # "0": every process is a fresh `python -m` (slower, nothing shared)
REPLY_TIMEOUT_S = 30.0
UNKNOWN_EXIT = 255  # the fork server that would have reported this child's exit code is gone


class ChildProcess(Protocol):
    """What the managers use of a started process (``subprocess.Popen`` has all of it)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class ForkedProcess:
    """A child of the fork server: its exit code comes from the fork server, which reaps it."""

    def __init__(self, pid: int, server: _ForkServer, args: list[str]):
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._server = server

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._server.wait_for_exits(0.1)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"ForkedProcess(pid={self.pid}, returncode={self.returncode})"


class _ForkServer:
    """The server's end of the fork server's pipes: one request at a time, a thread reading replies."""

    def __init__(self, data_dir: Path):
        env = process_tree.child_env(data_dir, FORKSERVER_OWNER)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(data_dir / "forkserver.log", "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", FORKSERVER_MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        self._ready = threading.Event()
        self._replies: queue.Queue[Spawned | SpawnFailed] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._changed = threading.Condition()
        self._send = threading.Lock()
        self._next_id = 0
        self.gone = False
        threading.Thread(target=self._read, name="opd-forkserver-replies", daemon=True).start()

    @property
    def alive(self) -> bool:
        return not self.gone and self._proc.poll() is None

    def wait_ready(self, timeout_s: float) -> bool:
        return self._ready.wait(timeout_s) and self.alive

    def spawn(self, module: str, args: list[str], env: dict[str, str], log: Path) -> ForkedProcess:
        argv = [sys.executable, "-m", module, *args]
        with self._send:
            self._next_id += 1
            request = SpawnRequest(
                id=self._next_id,
                module=module,
                args=args,
                env=env,
                cwd=os.getcwd(),
                log=str(log),
                title=process_tree.title(argv, env),
            )
            assert self._proc.stdin is not None
            self._proc.stdin.write(request.line())
            self._proc.stdin.flush()
            try:
                reply = self._replies.get(timeout=REPLY_TIMEOUT_S)
            except queue.Empty:
                self.close(timeout_s=0.0)  # a late fork must not run beside the fresh process
                raise
        if isinstance(reply, SpawnFailed):
            raise OSError(reply.error)
        return ForkedProcess(reply.pid, self, argv)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            if pid in self._exits:
                return self._exits[pid]
            if not self.gone:
                return None
        return None if process_tree.alive(pid) else UNKNOWN_EXIT

    def wait_for_exits(self, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """End of input ends it (its children, orphaned, stop as they would after a server's death)."""
        with contextlib.suppress(OSError, ValueError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5.0)

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            message = REPLY.validate_json(line)
            if isinstance(message, Exited):
                with self._changed:
                    self._exits[message.exited] = message.code
                    self._changed.notify_all()
            elif isinstance(message, Ready):
                self._ready.set()
            else:
                self._replies.put(message)
        with self._changed:
            self.gone = True
            self._changed.notify_all()
        self._ready.set()  # nobody waits for a fork server that is gone
        self._replies.put(SpawnFailed(error="the fork server exited"))


class Launcher:
    """Starts the control plane's long-lived children; one per server, shared by the managers."""

    def __init__(self, data_dir: Path, *, enabled: bool | None = None):
        self.data_dir = data_dir
        if enabled is None:
            enabled = sys.platform == "linux" and bool(settings.FORKSERVER.get())
        self.enabled = enabled
        self._server: _ForkServer | None = None
        self._lock = threading.Lock()

    def start(
        self, module: str, args: list[str], *, env: dict[str, str], log: Path, wait_s: float
    ) -> ChildProcess:
        """``python -m module args``, its output appended to ``log``; waits up to ``wait_s`` for the
        fork server to be ready (it starts at the first call) before falling back to a fresh process."""
        env = {**env, "PYTHONUNBUFFERED": env.get("PYTHONUNBUFFERED", "1")}  # a log in the order written
        server = self._fork_server()
        if server is not None and server.wait_ready(wait_s):
            try:
                return server.spawn(module, args, env, log)
            except (OSError, queue.Empty) as exc:
                print(f"opd serve: the fork server failed ({exc}); starting {module} afresh", file=sys.stderr)
        with open(log, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def close(self) -> None:
        """After the managers stopped their children: the fork server goes too."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.close()

    def _fork_server(self) -> _ForkServer | None:
        if not self.enabled:
            return None
        with self._lock:
            if self._server is None or not self._server.alive:
                self._server = _ForkServer(self.data_dir)
            return self._server
