"""Deployments, and the endpoints that serve base models, as rows."""

from __future__ import annotations

from typing import Any

from opd_nb.server.store.db import Database, now_text


class DeploymentRows(Database):
    """The ``deployments`` table (base-model endpoints are rows with ``is_base``)."""

    def put_deployment(self, row: dict[str, Any]) -> dict[str, Any]:
        """Insert a deployment, replacing a deleted one of the same name; the row as stored."""
        row = {**row, "gmt_create": now_text(), "gmt_modified": now_text(), "deleted": 0}
        row["path"] = self.paths.stored(row["path"])
        cols = ", ".join(row)
        self._run(
            f"INSERT OR REPLACE INTO deployments({cols}) VALUES ({','.join('?' * len(row))})", *row.values()
        )
        select = "SELECT * FROM deployments WHERE deployed_model = ?"
        stored = self._read(self.conn().execute(select, (row["deployed_model"],)).fetchone(), "path")
        assert stored is not None  # just written
        return stored

    def deployment(self, name: str) -> dict[str, Any] | None:
        """A deployment by name, deleted ones included (callers say "was deleted")."""
        return self._read(self._one("SELECT * FROM deployments WHERE deployed_model = ?", name), "path")

    def deployments(self, offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        """The listed deployments (not deleted, not the base-model endpoints), newest first."""
        where = "FROM deployments WHERE deleted = 0 AND is_base = 0"
        total = self._value(f"SELECT COUNT(*) {where}")
        rows = self._all(
            f"SELECT * {where} ORDER BY gmt_create DESC, rowid DESC LIMIT ? OFFSET ?", limit, offset
        )
        return self._read_all(rows, "path"), total

    def deployments_of(self, model_name: str) -> list[dict[str, Any]]:
        """The live deployments that serve `model_name` (newest first)."""
        rows = self._all(
            "SELECT * FROM deployments WHERE model_name = ? AND deleted = 0 AND is_base = 0 ORDER BY rowid DESC",
            model_name,
        )
        return self._read_all(rows, "path")

    def live_deployments(self) -> list[dict[str, Any]]:
        """Every row that is not deleted, base-model endpoints included (oldest first)."""
        return self._read_all(self._all("SELECT * FROM deployments WHERE deleted = 0 ORDER BY rowid"), "path")

    def set_deployment(self, name: str, **fields: Any) -> None:
        fields["gmt_modified"] = now_text()
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._run(f"UPDATE deployments SET {cols} WHERE deployed_model = ?", *fields.values(), name)

    def drop_deployment(self, name: str) -> None:
        """Forget a row for good (base-model endpoints: they are not listed, nothing asks for them)."""
        self._run("DELETE FROM deployments WHERE deployed_model = ?", name)
