"""The database under a data dir: its schema, one SQLite connection per thread, and write transactions.

Both the server process and each worker subprocess open the same database file. WAL mode lets
readers (the many watchers polling a job) run while a worker writes a log line or a metrics row,
and the busy timeout absorbs the short write locks. Blobs (zips, datasets, checkpoints) live on
disk next to the database; rows only hold their paths.

The per-resource row classes (:mod:`~opd_nb.server.store.jobs`, :mod:`~opd_nb.server.store.functions`,
:mod:`~opd_nb.server.store.deployments`) all build on :class:`Database`, so one
:class:`~opd_nb.server.store.Store` shares one connection per thread across them; SQL lives in these
modules only (and in `db_safety.py`, which checks and copies the file before a store opens it).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from opd_nb.server.db_safety import DB_FILE
from opd_nb.server.store.paths import DataPaths

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    file_id TEXT PRIMARY KEY, name TEXT NOT NULL, path TEXT NOT NULL, bytes INTEGER NOT NULL,
    lines INTEGER NOT NULL, purpose TEXT, description TEXT, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS uploads (
    key TEXT PRIMARY KEY, path TEXT, bytes INTEGER, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS layers (
    layer_code TEXT PRIMARY KEY, name TEXT, requirements TEXT, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS functions (
    entity_id TEXT PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, func TEXT NOT NULL,
    processor TEXT NOT NULL, unique_key TEXT, code_dir TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT PRIMARY KEY, entity_id TEXT NOT NULL, tag TEXT, status TEXT NOT NULL,
    url TEXT, token TEXT NOT NULL, pid INTEGER, log_path TEXT NOT NULL, runtime TEXT,
    created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, job_name TEXT NOT NULL, status TEXT NOT NULL,
    request TEXT NOT NULL, meta TEXT NOT NULL, finetuned_output TEXT, message TEXT, code TEXT,
    create_time TEXT NOT NULL, start_time TEXT, end_time TEXT, cancel_requested INTEGER DEFAULT 0,
    worker_pid INTEGER, progress TEXT, deleted INTEGER DEFAULT 0);
CREATE INDEX IF NOT EXISTS jobs_seq ON jobs(seq);
CREATE TABLE IF NOT EXISTS logs (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL, line TEXT NOT NULL,
    PRIMARY KEY (job_id, seq));
CREATE TABLE IF NOT EXISTS metrics (
    job_id TEXT NOT NULL, step INTEGER NOT NULL, row TEXT NOT NULL, PRIMARY KEY (job_id, step));
CREATE TABLE IF NOT EXISTS checkpoints (
    job_id TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, path TEXT NOT NULL,
    created_at TEXT NOT NULL, metrics TEXT, PRIMARY KEY (job_id, step));
CREATE TABLE IF NOT EXISTS deployments (
    deployed_model TEXT PRIMARY KEY, model_name TEXT NOT NULL, base_model TEXT, suffix TEXT,
    capacity INTEGER NOT NULL, status TEXT NOT NULL, kind TEXT NOT NULL, path TEXT NOT NULL,
    pid INTEGER, port INTEGER, token TEXT NOT NULL, message TEXT, is_base INTEGER DEFAULT 0,
    deleted INTEGER DEFAULT 0, gmt_create TEXT NOT NULL, gmt_modified TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS writes (
    path TEXT PRIMARY KEY, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS exports (
    model_name TEXT PRIMARY KEY, job_id TEXT NOT NULL, step INTEGER NOT NULL, checkpoint TEXT NOT NULL,
    display_name TEXT, path TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE (job_id, checkpoint));
"""


def now_text() -> str:
    """Bailian's timestamp style: local wall time, second precision."""
    return time.strftime("%Y-%m-%d %H:%M:%S")


class Database:
    """Thread-safe access to one data dir's database (a connection per thread)."""

    def __init__(self, data_dir: str | Path):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.data_dir / DB_FILE
        self.paths = DataPaths(self.data_dir)  # rows hold paths relative to the data dir (paths.py)
        self._local = threading.local()
        self.conn().executescript(SCHEMA)
        self._add_columns("deployments", plan="TEXT", plan_spec="TEXT", restarts="INTEGER", events="TEXT")

    def _add_columns(self, table: str, **columns: str) -> None:
        """Columns added after a table's first release (a data dir of an older server lacks them)."""
        have = {r[1] for r in self._all(f"PRAGMA table_info({table})")}
        for name, kind in columns.items():
            if name not in have:
                self._run(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
        return conn

    class _Tx:
        def __init__(self, conn: sqlite3.Connection):
            self.conn = conn

        def __enter__(self) -> sqlite3.Connection:
            self.conn.execute("BEGIN IMMEDIATE")
            return self.conn

        def __exit__(self, exc_type: Any, *_: Any) -> None:
            self.conn.execute("ROLLBACK" if exc_type else "COMMIT")

    def tx(self) -> Database._Tx:
        """A write transaction (takes the write lock up front, so no upgrade deadlocks)."""
        return Database._Tx(self.conn())

    def _one(self, sql: str, *args: Any) -> sqlite3.Row | None:
        return self.conn().execute(sql, args).fetchone()

    def _value(self, sql: str, *args: Any) -> Any:
        """The first column of an aggregate's one row (COUNT, SUM, MAX always answer a row)."""
        return self.conn().execute(sql, args).fetchone()[0]

    def _all(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        return self.conn().execute(sql, args).fetchall()

    def _run(self, sql: str, *args: Any) -> int:
        return self.conn().execute(sql, args).rowcount

    def _read(self, row: sqlite3.Row | None, *path_columns: str) -> dict[str, Any] | None:
        """A row as a dict, its `path_columns` as absolute paths under this data dir."""
        if row is None:
            return None
        out = dict(row)
        for col in path_columns:
            if isinstance(out.get(col), str):
                out[col] = self.paths.absolute(out[col])
        return out

    def _read_all(self, rows: list[sqlite3.Row], *path_columns: str) -> list[dict[str, Any]]:
        return [r for row in rows if (r := self._read(row, *path_columns)) is not None]
