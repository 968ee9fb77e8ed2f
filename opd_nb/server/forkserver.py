"""The fork server: job workers and serving processes start from a process that imported torch once.

Why: every worker and deployment used to be a fresh ``python -m``, and each paid 7-10 s of
``torch``/``transformers`` import before its first step, which on two cores was the largest single
cost of a job on the tiny pair. This process imports them once (``PREIMPORTS``), never computes
(no OpenMP pool exists to be broken by ``fork``) and forks a child per request; the child becomes
what ``python -m MODULE ARGS`` would have been: its own session, its log on fds 1 and 2, the
request's environment, working directory and process title (the tree's owner tag, see
:func:`opd_nb.server.process_tree.title`), and ``runpy`` runs the module as ``__main__``.

Protocol (single-threaded, JSON lines typed in :mod:`opd_nb.server.fork_protocol`; the server side is
:mod:`opd_nb.server.launcher`): it writes ``{"ready": pid}`` once imported, answers each ``{"id", "module",
"args", "env", "cwd", "log", "title"}`` with ``{"id", "pid"}`` or ``{"id", "error"}``, and reports each
child's end as ``{"exited": pid, "code": c}`` (``Popen.returncode``'s convention). End of input (the server is gone,
even by SIGKILL) ends it at once; its children see their parent change and stop as they would have.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import os
import runpy
import select
import sys
import threading
import traceback
import warnings

from opd_nb.server.fork_protocol import Exited, ForkReply, Ready, Spawned, SpawnFailed, SpawnRequest
from opd_nb.server.worker import WATCH_ENV

PREIMPORTS = (
    "torch",
    "transformers",
    "transformers.models.qwen3.modeling_qwen3",  # the tiny pair's architecture (lazy in transformers)
    "opd_nb.server.worker",
    "opd_nb.engine.trainer",
    "opd_nb.engine.serving",
    "opd_nb.functions.server",
    "uvicorn",
    "setproctitle",
)
REAP_EVERY_S = 0.1


def main() -> int:
    requests, replies = os.dup(0), os.dup(1)  # private: the children get neither
    _point_stdio_at(os.devnull)
    for name in PREIMPORTS:
        with contextlib.suppress(ImportError):  # without the engine extra: nothing to import once
            importlib.import_module(name)
    _reply(replies, Ready(ready=os.getpid()))
    pending: bytes = b""  # a request line not complete yet
    while True:
        _reap(replies)
        readable, _, _ = select.select([requests], [], [], REAP_EVERY_S)
        if not readable:
            continue
        chunk = os.read(requests, 1 << 16)
        if not chunk:  # the server is gone: at once (no interpreter teardown), so the children see it
            os._exit(0)
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            _reply(replies, _spawn(SpawnRequest.model_validate_json(line), (requests, replies)))


def _spawn(request: SpawnRequest, private: tuple[int, int]) -> Spawned | SpawnFailed:
    try:
        log = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        return SpawnFailed(id=request.id, error=f"cannot open {request.log}: {exc}")
    env = dict(request.env)
    env[WATCH_ENV] = str(os.getpid())  # the child's parent, which ends with the server
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _become(request, env, log, private)
        finally:
            os._exit(code)
    os.close(log)
    return Spawned(id=request.id, pid=pid)


def _become(request: SpawnRequest, env: dict[str, str], log: int, private: tuple[int, int]) -> int:
    """In the child: turn into ``python -m MODULE ARGS`` and run it; returns its exit code."""
    os.setsid()
    for fd in private:
        os.close(fd)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    _fresh_text_streams()
    import setproctitle

    setproctitle.setproctitle(request.title)  # before the environment changes: it moves environ
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request.cwd)
    warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)  # preimported, as meant
    _set_torch_threads(env)
    sys.argv = [request.module, *request.args]
    try:
        runpy.run_module(request.module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - what `python -m` prints, into the child's own log
        traceback.print_exc()
        code = 1
    return _finish(code)


def _point_stdio_at(path: str) -> None:
    null = os.open(path, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)


def _fresh_text_streams() -> None:
    """Streams over the child's fds 1 and 2, unbuffered as the server's children always were."""
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the process's stdin for its whole life
    os.dup2(sys.stdin.fileno(), 0)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)
        stream.reconfigure(line_buffering=True)
        setattr(sys, name, stream)


def _set_torch_threads(env: dict[str, str]) -> None:
    """OpenMP read its thread count when torch loaded here; the child's environment says its own."""
    torch = sys.modules.get("torch")
    with contextlib.suppress(KeyError, ValueError):
        if torch is not None:
            torch.set_num_threads(max(1, int(env["OMP_NUM_THREADS"])))


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _finish(code: int) -> int:
    """What interpreter exit does: threading's shutdown (executors told to stop, non-daemon threads
    joined), then atexit, then a flush; ``os._exit`` follows, so none of the parent's state is torn down."""
    with contextlib.suppress(Exception):
        # the interpreter's own step, private but stable since 3.4 (so typeshed leaves it out)
        threading._shutdown()  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    atexit._run_exitfuncs()  # pyright: ignore[reportPrivateUsage] - the same step of interpreter exit
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _reap(replies: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _reply(replies, Exited(exited=pid, code=os.waitstatus_to_exitcode(status)))


def _reply(replies: int, message: ForkReply) -> None:
    data = message.line()
    try:
        while data:
            data = data[os.write(replies, data) :]
    except BrokenPipeError:
        os._exit(0)  # the server is gone


if __name__ == "__main__":
    sys.exit(main())
