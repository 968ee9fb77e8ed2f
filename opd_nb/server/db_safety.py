"""The database's integrity check at start, and its rotated backups (SQLite's online backup API).

Why: ``opd.sqlite3`` is the only record of which jobs exist; their directories hold the data but
nothing lists them. An emptied file used to start as a healthy server with 0 jobs, garbage in it
started "healthy" too, then answered 500s, and a deleted one started as a new server whose start-up
sweep then removed function directories it did not know. So a start checks the file (``PRAGMA
quick_check``) and refuses, with one line naming the file and the recovery path, when it is damaged,
or when it is missing or holds no record while what only a database accounts for remains (job,
function, dataset, zip or deployment entries; for a missing one, backups too). The recovery path is a backup: one is taken at each start and on each
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


DATA_FOLDERS = {  # what a database accounts for: folder -> what one entry of it is (singular, plural)
    "jobs": ("job directory", "job directories"),
    "functions": ("function directory", "function directories"),
    "files": ("uploaded dataset", "uploaded datasets"),
    "uploads": ("function zip", "function zips"),
    "deployments": ("deployment directory", "deployment directories"),
}
_RECORD_TABLES = ("jobs", "functions", "files", "uploads", "deployments", "writes")
MISSING, EMPTY = "it is missing", "it is empty"


def _problem(db_path: Path) -> str | None:
    """What is wrong with the database file (missing, damaged, or holding no record), or None when it is sound."""
    if not db_path.exists():
        return MISSING
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30.0)
        try:
            verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            records = sum(
                conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in _RECORD_TABLES if t in tables
            )
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return f"it is damaged ({exc})"
    if verdict != "ok":
        return f"it is damaged (integrity check: {verdict})"
    return EMPTY if records == 0 else None


def _remains(data_dir: Path, with_backups: bool) -> list[str]:
    """What the data dir holds that only a database can account for ("2 job directories", ...)."""
    counts = [(_count(data_dir / folder), names) for folder, names in DATA_FOLDERS.items()]
    if with_backups:
        counts.append((len(backups(data_dir)), ("backup", "backups")))
    return [f"{n} {names[n != 1]}" for n, names in counts if n]


def _count(folder: Path) -> int:
    return sum(1 for _ in folder.iterdir()) if folder.is_dir() else 0


def check_database(data_dir: Path) -> str | None:
    """The one-line refusal for a damaged database, or a missing or empty one beside what a database
    accounts for (job, function, dataset, upload or deployment entries, or backups of a missing one); else
    None. A missing database beside all that is no new server: its start would list no job and its sweep
    would treat every file as unknown, so it is refused like a damaged one, with the restore line."""
    db_path = data_dir / DB_FILE
    problem = _problem(db_path)
    if problem is None:
        return None
    remains = _remains(data_dir, with_backups=problem == MISSING)
    if problem in (MISSING, EMPTY) and not remains:
        return None  # a new data dir (or one that never held anything)
    lost = f" but {', '.join(remains)} remain" if remains else ""
    found = backups(data_dir)
    if found:
        fix = (
            f"restore the newest backup: cp {found[0]} {db_path} && rm -f {db_path}-wal {db_path}-shm "
            f"(older ones are in {found[0].parent})"
        )
    elif problem in (MISSING, EMPTY):
        fix = (
            f"no backup exists in {data_dir / BACKUP_DIR}; restore {db_path} from a copy of this data dir, "
            "or start with another --data-dir (nothing here is removed)"
        )
    else:
        fix = f"no backup exists in {data_dir / BACKUP_DIR}; move {db_path} aside to start with an empty database"
    return f"error: the database {db_path} cannot be used: {problem}{lost}; {fix}"
