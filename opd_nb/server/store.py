"""SQLite (WAL) persistence shared by the control plane and its job workers.

Both the server process and each worker subprocess open the same database file. WAL mode lets
readers (the many watchers polling a job) run while a worker writes a log line or a metrics row,
and the busy timeout absorbs the short write locks. Blobs (zips, datasets, checkpoints) live on
disk next to the database; rows only hold their paths.
"""

from __future__ import annotations

from opd_nb.server.store_db import SCHEMA, Database, now_text
from opd_nb.server.store_deployments import DeploymentRows
from opd_nb.server.store_functions import FileRows, FunctionRows
from opd_nb.server.store_jobs import JobRows, StepRows

__all__ = ["SCHEMA", "Database", "Store", "now_text"]


class Store(JobRows, StepRows, FileRows, FunctionRows, DeploymentRows):
    """Everything one data dir stores, one class per resource over one connection per thread."""
