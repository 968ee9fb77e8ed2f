"""SQLite (WAL) persistence shared by the control plane and its job workers: one Store, a row class per resource."""

from __future__ import annotations

import json

from opd_nb.server.store.deployments import DeploymentRows
from opd_nb.server.store.functions import FileRows, FunctionRows
from opd_nb.server.store.jobs import JobRows, StepRows
from opd_nb.server.store.paths import map_path_keys

__all__ = ["Store"]

PATH_COLUMNS = (  # every column that holds a path (a job's meta holds more: paths.PATH_KEYS)
    ("files", "path"),
    ("uploads", "path"),
    ("functions", "code_dir"),
    ("instances", "log_path"),
    ("checkpoints", "path"),
    ("exports", "path"),
    ("deployments", "path"),
)


class Store(JobRows, StepRows, FileRows, FunctionRows, DeploymentRows):
    """Everything one data dir stores, one class per resource over one connection per thread."""

    def migrate_paths(self) -> int:
        """Rewrite the paths rows of an older server hold (absolute, maybe under the data dir's old place)
        as relative ones (:mod:`opd_nb.server.store.paths`); returns how many rows changed. Run at start."""
        changed = 0
        with self.tx() as conn:
            for table, col in PATH_COLUMNS:
                rows = conn.execute(f"SELECT rowid, {col} FROM {table} WHERE {col} IS NOT NULL").fetchall()
                for rowid, text in rows:
                    if (new := self.paths.migrated(text)) != text:
                        conn.execute(f"UPDATE {table} SET {col} = ? WHERE rowid = ?", (new, rowid))
                        changed += 1
            for rowid, text in conn.execute("SELECT rowid, meta FROM jobs").fetchall():
                old = json.loads(text)
                if (new := map_path_keys(old, self.paths.migrated)) != old:
                    conn.execute("UPDATE jobs SET meta = ? WHERE rowid = ?", (json.dumps(new), rowid))
                    changed += 1
        return changed
