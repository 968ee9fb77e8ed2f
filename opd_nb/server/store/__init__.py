"""SQLite (WAL) persistence shared by the control plane and its job workers: one Store, a row class per resource."""

from __future__ import annotations

from opd_nb.server.store.deployments import DeploymentRows
from opd_nb.server.store.functions import FileRows, FunctionRows
from opd_nb.server.store.jobs import JobRows, StepRows

__all__ = ["Store"]


class Store(JobRows, StepRows, FileRows, FunctionRows, DeploymentRows):
    """Everything one data dir stores, one class per resource over one connection per thread."""
