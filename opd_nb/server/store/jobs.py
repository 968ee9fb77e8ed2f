"""A job's rows: the job record itself, and what its steps add (logs, metrics, checkpoints, exports)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from opd_nb.constants import PENDING, STEP_SECONDS, TOKENS_PER_S
from opd_nb.server.db_safety import backup_database
from opd_nb.server.store.db import Database, now_text
from opd_nb.server.store.job_record import JobMeta, JobRecord
from opd_nb.server.store.paths import map_path_keys


class JobRows(Database):
    """The ``jobs`` table, read and written as :class:`~opd_nb.server.store.job_record.JobRecord`."""

    def insert_job(self, job_id: str, job_name: str, request: dict[str, Any], meta: JobMeta) -> None:
        with self.tx() as conn:
            seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            conn.execute(
                "INSERT INTO jobs(job_id, seq, job_name, status, request, meta, create_time) VALUES (?,?,?,?,?,?,?)",
                (job_id, seq, job_name, PENDING, json.dumps(request), self._meta_text(meta), now_text()),
            )

    def job(self, job_id: str) -> JobRecord | None:
        row = self._one("SELECT * FROM jobs WHERE job_id = ? AND deleted = 0", job_id)
        return self._job_record(row) if row else None

    def jobs(self, offset: int, limit: int, model: str | None = None) -> tuple[list[JobRecord], int]:
        """A page of jobs, newest first; `model`: only the jobs whose request's ``model`` is that id."""
        where, args = "WHERE deleted = 0", list[str]()
        if model is not None:
            where += " AND json_extract(request, '$.model') = ?"
            args.append(model)
        total = self._value(f"SELECT COUNT(*) FROM jobs {where}", *args)
        rows = self._all(
            f"SELECT * FROM jobs {where} ORDER BY seq DESC LIMIT ? OFFSET ?", *args, limit, offset
        )
        return [self._job_record(r) for r in rows], total

    def jobs_with_status(self, *statuses: str) -> list[JobRecord]:
        marks = ",".join("?" * len(statuses))
        rows = self._all(
            f"SELECT * FROM jobs WHERE status IN ({marks}) AND deleted = 0 ORDER BY seq", *statuses
        )
        return [self._job_record(r) for r in rows]

    def set_job(self, job_id: str, *, only_if_status: tuple[str, ...] | None = None, **fields: Any) -> bool:
        """Update columns (``progress``: a :class:`JobProgress` or None; the meta: :meth:`update_meta`);
        with `only_if_status`, only when the current status is one of those."""
        if fields.get("progress") is not None:
            fields["progress"] = fields["progress"].model_dump_json()
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

    def update_meta(self, job_id: str, change: Callable[[JobMeta], JobMeta]) -> None:
        """Replace a job's meta with ``change(meta)``, read and written in one transaction (the worker
        and the server both add to it)."""
        with self.tx() as conn:
            row = conn.execute("SELECT meta FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                return
            meta = change(self._meta(row[0]))
            conn.execute("UPDATE jobs SET meta = ? WHERE job_id = ?", (self._meta_text(meta), job_id))

    def _meta_text(self, meta: JobMeta) -> str:
        """The meta as stored: its paths relative to the data dir."""
        return json.dumps(map_path_keys(meta.model_dump(mode="json"), self.paths.stored))

    def _meta(self, text: str) -> JobMeta:
        """A stored meta, its paths absolute under this data dir."""
        return JobMeta.model_validate(map_path_keys(json.loads(text), self.paths.absolute))

    def _job_record(self, row: sqlite3.Row) -> JobRecord:
        out = dict(row)
        out["request"] = json.loads(out["request"])
        out["meta"] = self._meta(out["meta"])
        out["progress"] = json.loads(out["progress"]) if out.get("progress") else None
        return JobRecord.model_validate(out)

    def cancel_requested(self, job_id: str) -> bool:
        """Whether a cancel was asked for (a deleted or unknown job counts as canceled)."""
        row = self._one("SELECT cancel_requested FROM jobs WHERE job_id = ?", job_id)
        return bool(row is None or row[0])


class StepRows(Database):
    """What a running job reports: log lines, metric rows, checkpoints, and the checkpoints exported."""

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
        return self._value("SELECT COALESCE(MAX(seq), 0) FROM logs WHERE job_id = ?", job_id)

    def add_metrics(self, job_id: str, step: int, row: dict[str, Any]) -> None:
        """Write a step's metrics; keys already there that `row` lacks stay (the engine's row and the
        trace numbers of the same step arrive separately, in either order)."""
        with self.tx() as conn:
            old = conn.execute(
                "SELECT row FROM metrics WHERE job_id = ? AND step = ?", (job_id, step)
            ).fetchone()
            merged = {**json.loads(old[0]), **row} if old else row
            conn.execute(
                "INSERT OR REPLACE INTO metrics(job_id, step, row) VALUES (?,?,?)",
                (job_id, step, json.dumps(merged)),
            )

    def metrics(self, job_id: str) -> list[dict[str, Any]]:
        return [
            json.loads(r[0])
            for r in self._all("SELECT row FROM metrics WHERE job_id = ? ORDER BY step", job_id)
        ]

    def add_checkpoint(self, job_id: str, step: int, name: str, path: str, metrics: dict[str, Any]) -> None:
        with self.tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO checkpoints(job_id, step, name, path, created_at, metrics) VALUES (?,?,?,?,?,?)",
                (job_id, step, name, self.paths.stored(path), now_text(), json.dumps(metrics)),
            )

    def token_usage(self, job_id: str) -> int:
        """The tokens a job's steps processed (each step's tokens/s times its seconds), as Bailian's ``usage``."""
        rate, seconds = (f"json_extract(row, '$.\"{name}\"')" for name in (TOKENS_PER_S, STEP_SECONDS))
        return round(
            self._value(f"SELECT SUM({rate} * {seconds}) FROM metrics WHERE job_id = ?", job_id) or 0
        )

    def checkpoints(self, job_id: str) -> list[dict[str, Any]]:
        rows = self._all("SELECT * FROM checkpoints WHERE job_id = ? ORDER BY step", job_id)
        return [
            {
                "name": r["name"],
                "step": r["step"],
                "path": self.paths.absolute(r["path"]),
                "created_at": r["created_at"],
                "metrics": json.loads(r["metrics"] or "{}"),
            }
            for r in rows
        ]

    # ---- exported checkpoints (deployable by their model name) -----------------------------------
    def add_export(self, row: dict[str, Any]) -> None:
        """Record an export; a checkpoint exported before keeps its first name (export is idempotent)."""
        row = {**row, "created_at": now_text(), "path": self.paths.stored(row["path"])}
        cols = ", ".join(row)
        self._run(f"INSERT OR IGNORE INTO exports({cols}) VALUES ({','.join('?' * len(row))})", *row.values())

    def exports(self, job_id: str) -> dict[str, dict[str, Any]]:
        """A job's exported checkpoints by checkpoint name."""
        rows = self._read_all(self._all("SELECT * FROM exports WHERE job_id = ?", job_id), "path")
        return {r["checkpoint"]: r for r in rows}

    def export(self, model_name: str) -> dict[str, Any] | None:
        return self._read(self._one("SELECT * FROM exports WHERE model_name = ?", model_name), "path")

    def drop_steps_after(self, job_id: str, step: int) -> None:
        """Forget metric and checkpoint rows past ``step`` (a job resuming from checkpoint ``step``)."""
        with self.tx() as conn:
            conn.execute("DELETE FROM metrics WHERE job_id = ? AND step > ?", (job_id, step))
            conn.execute("DELETE FROM checkpoints WHERE job_id = ? AND step > ?", (job_id, step))
