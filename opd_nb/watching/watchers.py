"""Detached watchers: `opd watch JOB --detach` keeps watching in a process that outlives the notebook.

Each watcher is a `opd watch JOB --json ...` child in a session of its own, recorded by a pid file
(JSON) and writing a log beside it, in ``$OPD_WATCH_DIR`` (default ``~/.cache/opd-nb/watchers``).
`--list` reads those files (a dead pid is reported, then its file removed); `--stop` ends one
watcher by its recorded pid. Secrets never enter the files: a webhook URL reaches the child in its
environment only.
"""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel

from opd_nb import settings
from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin

DIR_VAR = settings.WATCH_DIR.name


def watch_dir() -> Path:
    """``$OPD_WATCH_DIR``, else ``$XDG_CACHE_HOME/opd-nb/watchers``."""
    return (
        settings.WATCH_DIR.get()
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opd-nb" / "watchers"
    )


class Watcher(ResultMixin, BaseModel):
    job_id: str
    pid: int
    started: str
    log: str
    alive: bool = True
    ended: str | None = None  # when it ended, as far as known: stopped now, else its log's last write
    options: list[str] = []  # what it does (guard, notify format), never a URL

    def __str__(self) -> str:
        if self.alive:
            state = f"watching since {self.started}"
        else:
            state = f"started {self.started}, ended" + (f" {self.ended}" if self.ended else "")
        extra = f" ({', '.join(self.options)})" if self.options else ""
        return f"{self.job_id}: pid {self.pid}, {state}{extra}; log {self.log}"

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"


class WatcherList(ResultMixin, BaseModel):
    watchers: list[Watcher] = []

    def __str__(self) -> str:
        return "\n".join(map(str, self.watchers)) or "no detached watchers"

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (ended, not yet reaped by its parent) counts as ended
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _stamp(seconds: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds))


def _pid_file(job_id: str) -> Path:
    return watch_dir() / f"{job_id}.json"


def start(job_id: str, argv: Sequence[str], env: Mapping[str, str], options: Sequence[str]) -> Watcher:
    """Start `opd <argv>` detached (its own session, no terminal) and record it."""
    running = _read(_pid_file(job_id))
    if running is not None and running.alive:
        raise OpdError(
            f"a watcher of {job_id} is already running (pid {running.pid})", fix=f"opd watch {job_id} --stop"
        )
    folder = watch_dir()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{job_id}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "opd_nb", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )
    info = Watcher(
        job_id=job_id,
        pid=proc.pid,
        started=_stamp(),
        log=str(log),
        options=list(options),
    )
    _pid_file(job_id).write_text(info.model_dump_json(), encoding="utf-8")
    return info


def _read(path: Path) -> Watcher | None:
    try:
        info = Watcher.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    info.alive = _alive(info.pid)
    if not info.alive:  # a watcher writes its log up to its last line: that write is when it ended
        try:
            info.ended = f"by {_stamp(Path(info.log).stat().st_mtime)} (its log's last write)"
        except OSError:
            info.ended = None
    return info


def list_watchers() -> WatcherList:
    """Every recorded watcher; the record of one that has ended is shown once, then removed."""
    found = []
    for path in sorted(watch_dir().glob("*.json")):
        info = _read(path)
        if info is None:
            continue
        found.append(info)
        if not info.alive:
            path.unlink(missing_ok=True)
    return WatcherList(watchers=found)


def stop(job_id: str, timeout_s: float = 10.0) -> Watcher:
    """End the detached watcher of `job_id` (SIGTERM, then SIGKILL) and remove its record."""
    path = _pid_file(job_id)
    info = _read(path)
    if info is None:
        raise OpdError(f"no detached watcher of {job_id}", fix="see them with `opd watch --list`")
    if info.alive:
        os.kill(info.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(info.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(info.pid):
            os.kill(info.pid, signal.SIGKILL)
        info.ended = f"{_stamp()} (stopped now)"
    path.unlink(missing_ok=True)
    info.alive = False
    return info
