"""SQLite (WAL) persistence shared by the control plane and its job workers.

Both the server process and each worker subprocess open the same database file. WAL mode lets
readers (the many watchers polling a job) run while a worker writes a log line or a metrics row,
and the busy timeout absorbs the short write locks. Blobs (zips, datasets, checkpoints) live on
disk next to the database; rows only hold their paths.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from opd_nb.constants import PENDING, STEP_SECONDS, TOKENS_PER_S
from opd_nb.server.db_safety import DB_FILE, backup_database

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
CREATE TABLE IF NOT EXISTS exports (
    model_name TEXT PRIMARY KEY, job_id TEXT NOT NULL, step INTEGER NOT NULL, checkpoint TEXT NOT NULL,
    display_name TEXT, path TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE (job_id, checkpoint));
"""


def now_text() -> str:
    """Bailian's timestamp style: local wall time, second precision."""
    return time.strftime("%Y-%m-%d %H:%M:%S")


class Store:
    """Thread-safe access to one data dir's database (a connection per thread)."""

    def __init__(self, data_dir: str | Path):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.data_dir / DB_FILE
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

    def tx(self) -> Store._Tx:
        """A write transaction (takes the write lock up front, so no upgrade deadlocks)."""
        return Store._Tx(self.conn())

    def _one(self, sql: str, *args: Any) -> sqlite3.Row | None:
        return self.conn().execute(sql, args).fetchone()

    def _all(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        return self.conn().execute(sql, args).fetchall()

    def _run(self, sql: str, *args: Any) -> int:
        return self.conn().execute(sql, args).rowcount

    # ---- jobs ---------------------------------------------------------------------------------
    def insert_job(self, job_id: str, job_name: str, request: dict, meta: dict) -> None:
        with self.tx() as conn:
            seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            conn.execute(
                "INSERT INTO jobs(job_id, seq, job_name, status, request, meta, create_time) VALUES (?,?,?,?,?,?,?)",
                (job_id, seq, job_name, PENDING, json.dumps(request), json.dumps(meta), now_text()),
            )

    def job(self, job_id: str) -> dict | None:
        row = self._one("SELECT * FROM jobs WHERE job_id = ? AND deleted = 0", job_id)
        return _job_dict(row) if row else None

    def jobs(self, offset: int, limit: int, model: str | None = None) -> tuple[list[dict], int]:
        """A page of jobs, newest first; `model`: only the jobs whose request's ``model`` is that id."""
        where, args = "WHERE deleted = 0", []
        if model is not None:
            where += " AND json_extract(request, '$.model') = ?"
            args.append(model)
        total = self._one(f"SELECT COUNT(*) FROM jobs {where}", *args)[0]
        rows = self._all(
            f"SELECT * FROM jobs {where} ORDER BY seq DESC LIMIT ? OFFSET ?", *args, limit, offset
        )
        return [_job_dict(r) for r in rows], total

    def jobs_with_status(self, *statuses: str) -> list[dict]:
        marks = ",".join("?" * len(statuses))
        rows = self._all(
            f"SELECT * FROM jobs WHERE status IN ({marks}) AND deleted = 0 ORDER BY seq", *statuses
        )
        return [_job_dict(r) for r in rows]

    def set_job(self, job_id: str, *, only_if_status: tuple[str, ...] | None = None, **fields: Any) -> bool:
        """Update columns; with `only_if_status`, only when the current status is one of those."""
        for key in ("meta", "progress"):
            if key in fields and not isinstance(fields[key], str | None):
                fields[key] = json.dumps(fields[key])
        cols = ", ".join(f"{k} = ?" for k in fields)
        sql = f"UPDATE jobs SET {cols} WHERE job_id = ?"
        args: list[Any] = [*fields.values(), job_id]
        if only_if_status:
            sql += f" AND status IN ({','.join('?' * len(only_if_status))})"
            args += list(only_if_status)
        with self.tx() as conn:
            changed = conn.execute(sql, args).rowcount > 0
        if changed and "status" in fields:
            backup_database(self.path)  # the recovery path for a damaged database (db_safety.py)
        return changed

    def merge_meta(self, job_id: str, **extra: Any) -> None:
        with self.tx() as conn:
            row = conn.execute("SELECT meta FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                return
            meta = json.loads(row[0])
            meta.update(extra)
            conn.execute("UPDATE jobs SET meta = ? WHERE job_id = ?", (json.dumps(meta), job_id))

    # ---- logs, metrics, checkpoints ---------------------------------------------------------
    def add_log(self, job_id: str, *lines: str) -> None:
        ts = time.time()
        with self.tx() as conn:
            seq = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM logs WHERE job_id = ?", (job_id,)
            ).fetchone()[0]
            conn.executemany(
                "INSERT INTO logs(job_id, seq, ts, line) VALUES (?,?,?,?)",
                [(job_id, seq + i + 1, ts, line) for i, line in enumerate(lines)],
            )

    def logs(self, job_id: str, start_seq: int, limit: int) -> list[tuple[int, str]]:
        rows = self._all(
            "SELECT seq, line FROM logs WHERE job_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
            job_id,
            start_seq,
            limit,
        )
        return [(r[0], r[1]) for r in rows]

    def log_count(self, job_id: str) -> int:
        return self._one("SELECT COALESCE(MAX(seq), 0) FROM logs WHERE job_id = ?", job_id)[0]

    def add_metrics(self, job_id: str, step: int, row: dict) -> None:
        with self.tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO metrics(job_id, step, row) VALUES (?,?,?)",
                (job_id, step, json.dumps(row)),
            )

    def metrics(self, job_id: str) -> list[dict]:
        return [
            json.loads(r[0])
            for r in self._all("SELECT row FROM metrics WHERE job_id = ? ORDER BY step", job_id)
        ]

    def add_checkpoint(self, job_id: str, step: int, name: str, path: str, metrics: dict) -> None:
        with self.tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO checkpoints(job_id, step, name, path, created_at, metrics) VALUES (?,?,?,?,?,?)",
                (job_id, step, name, path, now_text(), json.dumps(metrics)),
            )

    def token_usage(self, job_id: str) -> int:
        """The tokens a job's steps processed (each step's tokens/s times its seconds), as Bailian's ``usage``."""
        rate, seconds = (f"json_extract(row, '$.\"{name}\"')" for name in (TOKENS_PER_S, STEP_SECONDS))
        row = self._one(f"SELECT SUM({rate} * {seconds}) FROM metrics WHERE job_id = ?", job_id)
        return round(row[0] or 0)

    def checkpoints(self, job_id: str) -> list[dict]:
        rows = self._all("SELECT * FROM checkpoints WHERE job_id = ? ORDER BY step", job_id)
        return [
            {
                "name": r["name"],
                "step": r["step"],
                "path": r["path"],
                "created_at": r["created_at"],
                "metrics": json.loads(r["metrics"] or "{}"),
            }
            for r in rows
        ]

    # ---- exported checkpoints (deployable by their model name) -----------------------------------
    def add_export(self, row: dict[str, Any]) -> None:
        """Record an export; a checkpoint exported before keeps its first name (export is idempotent)."""
        row = {**row, "created_at": now_text()}
        cols = ", ".join(row)
        self._run(f"INSERT OR IGNORE INTO exports({cols}) VALUES ({','.join('?' * len(row))})", *row.values())

    def exports(self, job_id: str) -> dict[str, dict]:
        """A job's exported checkpoints by checkpoint name."""
        return {r["checkpoint"]: dict(r) for r in self._all("SELECT * FROM exports WHERE job_id = ?", job_id)}

    def export(self, model_name: str) -> dict | None:
        row = self._one("SELECT * FROM exports WHERE model_name = ?", model_name)
        return dict(row) if row else None

    def drop_steps_after(self, job_id: str, step: int) -> None:
        """Forget metric and checkpoint rows past ``step`` (a job resuming from checkpoint ``step``)."""
        with self.tx() as conn:
            conn.execute("DELETE FROM metrics WHERE job_id = ? AND step > ?", (job_id, step))
            conn.execute("DELETE FROM checkpoints WHERE job_id = ? AND step > ?", (job_id, step))

    def cancel_requested(self, job_id: str) -> bool:
        """Whether a cancel was asked for (a deleted or unknown job counts as canceled)."""
        row = self._one("SELECT cancel_requested FROM jobs WHERE job_id = ?", job_id)
        return bool(row is None or row[0])

    # ---- dataset files ------------------------------------------------------------------------
    def add_file(
        self, file_id: str, name: str, path: str, size: int, lines: int, purpose: str, description: str | None
    ) -> None:
        self._run(
            "INSERT INTO files VALUES (?,?,?,?,?,?,?,?)",
            file_id,
            name,
            path,
            size,
            lines,
            purpose,
            description,
            now_text(),
        )

    def file(self, file_id: str) -> dict | None:
        row = self._one("SELECT * FROM files WHERE file_id = ?", file_id)
        return dict(row) if row else None

    def files(self, offset: int, limit: int) -> tuple[list[dict], int]:
        total = self._one("SELECT COUNT(*) FROM files")[0]
        rows = self._all(
            "SELECT * FROM files ORDER BY created_at DESC, file_id LIMIT ? OFFSET ?", limit, offset
        )
        return [dict(r) for r in rows], total

    def delete_file(self, file_id: str) -> None:
        self._run("DELETE FROM files WHERE file_id = ?", file_id)

    # ---- function code: uploads, layers, registered functions, instances ----------------------
    def put_upload(self, key: str, path: str, size: int) -> None:
        self._run(
            "INSERT OR REPLACE INTO uploads(key, path, bytes, created_at) VALUES (?,?,?,?)",
            key,
            path,
            size,
            now_text(),
        )

    def upload_path(self, key: str) -> str | None:
        row = self._one("SELECT path FROM uploads WHERE key = ?", key)
        return row["path"] if row else None

    def add_layer(self, layer_code: str, name: str, requirements: str) -> None:
        self._run("INSERT INTO layers VALUES (?,?,?,?)", layer_code, name, requirements, now_text())

    def has_layer(self, layer_code: str) -> bool:
        return self._one("SELECT 1 FROM layers WHERE layer_code = ?", layer_code) is not None

    def add_function(
        self, entity_id: str, kind: str, name: str, func: str, processor: str, unique_key: str, code_dir: str
    ) -> None:
        self._run(
            "INSERT INTO functions VALUES (?,?,?,?,?,?,?,?)",
            entity_id,
            kind,
            name,
            func,
            processor,
            unique_key,
            code_dir,
            now_text(),
        )

    def function(self, entity_id: str) -> dict | None:
        row = self._one("SELECT * FROM functions WHERE entity_id = ?", entity_id)
        return dict(row) if row else None

    def add_instance(
        self,
        instance_id: str,
        entity_id: str,
        tag: str,
        status: str,
        token: str,
        log_path: str,
        runtime: dict,
    ) -> None:
        self._run(
            "INSERT INTO instances(instance_id, entity_id, tag, status, token, log_path, runtime, created_at) "
            "VALUES (?,?,?,?,?,?,?,?)",
            instance_id,
            entity_id,
            tag,
            status,
            token,
            log_path,
            json.dumps(runtime),
            now_text(),
        )

    def instance(self, instance_id: str) -> dict | None:
        row = self._one("SELECT * FROM instances WHERE instance_id = ?", instance_id)
        return dict(row) if row else None

    def instances_with_status(self, status: str) -> list[dict]:
        return [dict(r) for r in self._all("SELECT * FROM instances WHERE status = ?", status)]

    def set_instance(self, instance_id: str, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._run(f"UPDATE instances SET {cols} WHERE instance_id = ?", *fields.values(), instance_id)

    # ---- deployments (and the endpoints that serve base models) --------------------------------
    def put_deployment(self, row: dict[str, Any]) -> None:
        """Insert a deployment, replacing a deleted one of the same name."""
        row = {**row, "gmt_create": now_text(), "gmt_modified": now_text(), "deleted": 0}
        cols = ", ".join(row)
        self._run(
            f"INSERT OR REPLACE INTO deployments({cols}) VALUES ({','.join('?' * len(row))})", *row.values()
        )

    def deployment(self, name: str) -> dict | None:
        """A deployment by name, deleted ones included (callers say "was deleted")."""
        row = self._one("SELECT * FROM deployments WHERE deployed_model = ?", name)
        return dict(row) if row else None

    def deployments(self, offset: int, limit: int) -> tuple[list[dict], int]:
        """The listed deployments (not deleted, not the base-model endpoints), newest first."""
        where = "FROM deployments WHERE deleted = 0 AND is_base = 0"
        total = self._one(f"SELECT COUNT(*) {where}")[0]
        rows = self._all(
            f"SELECT * {where} ORDER BY gmt_create DESC, rowid DESC LIMIT ? OFFSET ?", limit, offset
        )
        return [dict(r) for r in rows], total

    def deployments_of(self, model_name: str) -> list[dict]:
        """The live deployments that serve `model_name` (newest first)."""
        rows = self._all(
            "SELECT * FROM deployments WHERE model_name = ? AND deleted = 0 AND is_base = 0 ORDER BY rowid DESC",
            model_name,
        )
        return [dict(r) for r in rows]

    def live_deployments(self) -> list[dict]:
        """Every row that is not deleted, base-model endpoints included (oldest first)."""
        return [dict(r) for r in self._all("SELECT * FROM deployments WHERE deleted = 0 ORDER BY rowid")]

    def set_deployment(self, name: str, **fields: Any) -> None:
        fields["gmt_modified"] = now_text()
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._run(f"UPDATE deployments SET {cols} WHERE deployed_model = ?", *fields.values(), name)

    def drop_deployment(self, name: str) -> None:
        """Forget a row for good (base-model endpoints: they are not listed, nothing asks for them)."""
        self._run("DELETE FROM deployments WHERE deployed_model = ?", name)


def _job_dict(row: sqlite3.Row) -> dict:
    out = dict(row)
    out["request"] = json.loads(out["request"])
    out["meta"] = json.loads(out["meta"])
    out["progress"] = json.loads(out["progress"]) if out.get("progress") else None
    return out
