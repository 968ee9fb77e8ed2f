"""The database's integrity check at start, and its rotated backups (SQLite's online backup API).

Why: ``opd.sqlite3`` is the only record of which jobs exist; their directories hold the data but
nothing lists them. An emptied file used to start as a healthy server with 0 jobs, and garbage in it
started "healthy" too, then answered 500s. So a start checks the file (``PRAGMA quick_check``) and
refuses, with one line naming the file and the recovery path, when it is damaged, or when it is empty
while job directories remain. The recovery path is a backup: one is taken at each start and on each
job state change (``Store.set_job`` of a ``status``), from the server or a worker alike, with
``sqlite3.Connection.backup`` (a consistent copy while others write), into ``backups/``, keeping the
newest :data:`KEEP_BACKUPS`. Restoring is a copy of the newest one over ``opd.sqlite3``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

DB_FILE = "opd.sqlite3"
BACKUP_DIR = "backups"
KEEP_BACKUPS = 5
_BACKUP_GLOB = "opd-*.sqlite3"


def backups(data_dir: Path) -> list[Path]:
    """The data dir's backups, newest first."""
    return sorted((data_dir / BACKUP_DIR).glob(_BACKUP_GLOB), key=lambda p: p.name, reverse=True)


def backup_database(db_path: Path, keep: int = KEEP_BACKUPS) -> Path | None:
    """Copy ``db_path`` into ``backups/`` (atomically: a copy is complete or absent); keep the newest ``keep``.

    Returns the new backup, or None when it could not be written (a full disk must not fail the
    state change that asked for it)."""
    folder = db_path.parent / BACKUP_DIR
    name = f"opd-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**9:09d}-{os.getpid()}.sqlite3"
    tmp = folder / f".{name}.tmp"
    try:
        folder.mkdir(exist_ok=True)
        src, dst = sqlite3.connect(db_path, timeout=30.0), sqlite3.connect(tmp)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
        os.replace(tmp, folder / name)
    except (OSError, sqlite3.Error):
        tmp.unlink(missing_ok=True)
        return None
    for old in backups(db_path.parent)[keep:]:
        old.unlink(missing_ok=True)
    return folder / name


def _problem(db_path: Path) -> str | None:
    """What is wrong with the database file, or None when it is sound (a missing file is a new one)."""
    if not db_path.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30.0)
        try:
            verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            jobs = conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] if "jobs" in tables else 0
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return f"it is damaged ({exc})"
    if verdict != "ok":
        return f"it is damaged (integrity check: {verdict})"
    return "it is empty" if jobs == 0 else None


def check_database(data_dir: Path) -> str | None:
    """The one-line refusal for a damaged database, or an empty one beside job directories; else None."""
    db_path = data_dir / DB_FILE
    problem = _problem(db_path)
    job_dirs = (
        [p for p in (data_dir / "jobs").iterdir() if p.is_dir()] if (data_dir / "jobs").is_dir() else []
    )
    if problem is None or (problem == "it is empty" and not job_dirs):
        return None
    lost = (
        f" but {len(job_dirs)} job director{'y' if len(job_dirs) == 1 else 'ies'} remain" if job_dirs else ""
    )
    found = backups(data_dir)
    if found:
        fix = (
            f"restore the newest backup: cp {found[0]} {db_path} && rm -f {db_path}-wal {db_path}-shm "
            f"(older ones are in {found[0].parent})"
        )
    else:
        fix = f"no backup exists in {data_dir / BACKUP_DIR}; move {db_path} aside to start with an empty database"
    return f"error: the database {db_path} cannot be used: {problem}{lost}; {fix}"
