"""Uploaded things: dataset files, function code (uploads, layers, registered functions) and instances,
and the journal of the writes that put them on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opd_nb.server.store.db import Database, now_text


class WriteRows(Database):
    """The journal of unfinished writes: the one list the start-up sweep removes files from.

    A write path names what it is about to create (relative to the data dir) before creating it, and
    strikes it off in the same transaction that records the finished thing (``finishes=``); so after a
    ``kill -9`` the journal names exactly the partial files, and a file it does not name (a user's, or
    anything a record holds) is never removed at start (:mod:`opd_nb.server.leftovers`)."""

    def begin_write(self, *paths: Path) -> None:
        for path in paths:
            self._run(
                "INSERT OR REPLACE INTO writes(path, created_at) VALUES (?,?)",
                self._relative(path),
                now_text(),
            )

    def end_write(self, *paths: Path) -> None:
        for path in paths:
            self._run("DELETE FROM writes WHERE path = ?", self._relative(path))

    def unfinished_writes(self) -> list[str]:
        return [r["path"] for r in self._all("SELECT path FROM writes ORDER BY path")]

    def clear_writes(self) -> None:
        """At start, once the sweep removed what they left: no write is under way."""
        self._run("DELETE FROM writes")

    def _relative(self, path: Path) -> str:
        return Path(path).relative_to(self.data_dir).as_posix()

    def held_paths(self) -> dict[Path, str]:
        """Every path a record of the write folders names (dataset files, zips, function code), with
        the record in words: what the start-up sweep never removes, whatever the journal says."""
        held: dict[Path, str] = {}
        for sql, what in (
            ("SELECT file_id, path FROM files", "file {}"),
            ("SELECT key, path FROM uploads WHERE path IS NOT NULL", "the upload {}"),
            ("SELECT entity_id, code_dir FROM functions", "function {}"),
        ):
            for key, text in self._all(sql):
                held[Path(self.paths.absolute(text))] = what.format(key)
        return held


class FileRows(WriteRows):
    """Dataset files uploaded with ``POST /files``."""

    def add_file(
        self,
        file_id: str,
        name: str,
        path: str,
        size: int,
        lines: int,
        purpose: str,
        description: str | None,
        finishes: tuple[Path, ...] = (),
    ) -> None:
        with self.tx():
            self._run(
                "INSERT INTO files VALUES (?,?,?,?,?,?,?,?)",
                file_id,
                name,
                self.paths.stored(path),
                size,
                lines,
                purpose,
                description,
                now_text(),
            )
            self.end_write(*finishes)

    def file(self, file_id: str) -> dict[str, Any] | None:
        return self._read(self._one("SELECT * FROM files WHERE file_id = ?", file_id), "path")

    def files(self, offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        total = self._value("SELECT COUNT(*) FROM files")
        rows = self._all(
            "SELECT * FROM files ORDER BY created_at DESC, file_id LIMIT ? OFFSET ?", limit, offset
        )
        return self._read_all(rows, "path"), total

    def delete_file(self, file_id: str) -> None:
        self._run("DELETE FROM files WHERE file_id = ?", file_id)


class FunctionRows(WriteRows):
    """Function code: zip uploads, dependency layers, registered functions and their instances."""

    def put_upload(self, key: str, path: str, size: int, finishes: tuple[Path, ...] = ()) -> None:
        with self.tx():
            self._run(
                "INSERT OR REPLACE INTO uploads(key, path, bytes, created_at) VALUES (?,?,?,?)",
                key,
                self.paths.stored(path),
                size,
                now_text(),
            )
            self.end_write(*finishes)

    def upload_path(self, key: str) -> str | None:
        row = self._one("SELECT path FROM uploads WHERE key = ?", key)
        return self.paths.absolute(row["path"]) if row and row["path"] else None

    def add_layer(self, layer_code: str, name: str, requirements: str) -> None:
        self._run("INSERT INTO layers VALUES (?,?,?,?)", layer_code, name, requirements, now_text())

    def has_layer(self, layer_code: str) -> bool:
        return self._one("SELECT 1 FROM layers WHERE layer_code = ?", layer_code) is not None

    def add_function(
        self,
        entity_id: str,
        kind: str,
        name: str,
        func: str,
        processor: str,
        unique_key: str,
        code_dir: str,
        finishes: tuple[Path, ...] = (),
    ) -> None:
        with self.tx():
            self._run(
                "INSERT INTO functions VALUES (?,?,?,?,?,?,?,?)",
                entity_id,
                kind,
                name,
                func,
                processor,
                unique_key,
                self.paths.stored(code_dir),
                now_text(),
            )
            self.end_write(*finishes)

    def function(self, entity_id: str) -> dict[str, Any] | None:
        return self._read(self._one("SELECT * FROM functions WHERE entity_id = ?", entity_id), "code_dir")

    def add_instance(
        self,
        instance_id: str,
        entity_id: str,
        tag: str,
        status: str,
        token: str,
        log_path: str,
        runtime: dict[str, Any],
    ) -> None:
        self._run(
            "INSERT INTO instances(instance_id, entity_id, tag, status, token, log_path, runtime, created_at) "
            "VALUES (?,?,?,?,?,?,?,?)",
            instance_id,
            entity_id,
            tag,
            status,
            token,
            self.paths.stored(log_path),
            json.dumps(runtime),
            now_text(),
        )

    def instance(self, instance_id: str) -> dict[str, Any] | None:
        return self._read(self._one("SELECT * FROM instances WHERE instance_id = ?", instance_id), "log_path")

    def instances_with_status(self, status: str) -> list[dict[str, Any]]:
        return self._read_all(self._all("SELECT * FROM instances WHERE status = ?", status), "log_path")

    def set_instance(self, instance_id: str, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._run(f"UPDATE instances SET {cols} WHERE instance_id = ?", *fields.values(), instance_id)
