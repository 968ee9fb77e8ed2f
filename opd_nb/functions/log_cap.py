"""A process's own log (its stdout and stderr, when they are a file) kept under a size cap.

Why: a reward that prints 1 MB per call filled a 55 MB disk in 5 s. Function servers and job
workers call :func:`keep_own_log_under` first thing. Past the cap the file is cut to its newest
:data:`LOG_KEEP_BYTES`, after a line saying so; the file is opened for appending, so every writer
carries on at its new end.

Two paths, because a size poll alone lagged: on a loaded machine the polling thread ran too late
and a 2 MiB cap let a log reach 8 MiB.

* Python's own ``sys.stdout``/``sys.stderr`` (``print``, tracebacks, logging) are replaced by a
  stream that checks the size at the write itself, so they can never pass the cap by more than one
  write.
* Whatever writes to the descriptor directly (C code, a child process sharing it) is caught by a
  thread that polls the size every :data:`LOG_POLL_S`.
"""

from __future__ import annotations

import io
import os
import stat
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer  # what RawIOBase.write takes (collections.abc.Buffer from 3.12)

from opd_nb import settings
from opd_nb.errors import OpdError

MAX_LOG_ENV = settings.MAX_LOG_BYTES.name  # a function server's or job worker's log cap (tests lower it)
MAX_LOG_BYTES: int = settings.MAX_LOG_BYTES.default or 0
LOG_KEEP_BYTES = 64 * 2**10  # the newest output kept when a log is cut
LOG_POLL_S = 0.2


class _CappedLog:
    """One log file (descriptor ``fd``, opened for appending) and its cap, shared by every writer."""

    def __init__(self, fd: int, limit: int):
        self.fd = fd
        self.limit = limit
        self.cuts = 0
        self._lock = threading.Lock()
        try:  # the descriptor is append-only: read its tail through another one
            self._reader: int | None = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        except OSError:
            self._reader = None

    def write(self, data: Buffer) -> int:
        with self._lock:
            written = os.write(self.fd, data)
            self._cut_if_over()
        return written

    def poll(self) -> None:
        with self._lock:
            self._cut_if_over()

    def _cut_if_over(self) -> None:
        try:
            size = os.fstat(self.fd).st_size
            if size <= self.limit:
                return
            start = max(0, size - LOG_KEEP_BYTES)
            keep = os.pread(self._reader, LOG_KEEP_BYTES, start) if self._reader is not None else b""
            self.cuts += 1
            note = (
                f"[opd] log cut ({self.cuts}x): it passed its cap of {self.limit / 2**20:g} MiB "
                f"(${MAX_LOG_ENV}); earlier output dropped, the newest {len(keep) // 1024} KiB follow\n"
            )
            os.ftruncate(self.fd, 0)
            os.write(self.fd, note.encode() + keep[keep.find(b"\n") + 1 :])
        except OSError:
            pass  # a full disk or a vanished file: the next write tries again


class _CappedRaw(io.RawIOBase):
    """The raw layer under one replacement stream (``sys.stdout`` or ``sys.stderr``): every write goes
    through the shared cap. One per stream, so closing one stream at shutdown leaves the other open."""

    def __init__(self, log: _CappedLog):
        super().__init__()
        self._log = log

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._log.fd

    def write(self, data: Buffer, /) -> int:
        return self._log.write(data)


def keep_own_log_under(max_bytes: int | None = None) -> None:
    """Cap this process's log at ``max_bytes`` (``$OPD_MAX_LOG_BYTES``); nothing happens when stdout is no file."""
    try:
        limit = max_bytes or settings.MAX_LOG_BYTES.get() or MAX_LOG_BYTES
        if not stat.S_ISREG(os.fstat(1).st_mode):
            return
    except (OSError, OpdError):  # `opd serve` refused a bad value at its start
        return
    log = _CappedLog(1, limit)
    for name in ("stdout", "stderr") if _same_file(1, 2) else ("stdout",):
        old = getattr(sys, name)
        if old is not None:
            old.flush()
        raw = io.BufferedWriter(_CappedRaw(log))
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", line_buffering=True)
        setattr(sys, name, stream)
    threading.Thread(target=_poll, args=(log,), name="opd-log-cap", daemon=True).start()


def _same_file(a: int, b: int) -> bool:
    try:
        one, two = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


def _poll(log: _CappedLog) -> None:
    while True:
        time.sleep(LOG_POLL_S)
        log.poll()
