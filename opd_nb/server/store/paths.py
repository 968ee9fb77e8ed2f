"""Paths in the database are relative to the data dir, so a data dir can be moved, copied or restored.

A row that names something under the data dir (a dataset, a zip, a function's code, a log, a
checkpoint, an export, a deployment's model, a job's files) stores it as ``jobs/<id>/...``; the
store hands every caller the absolute path under the data dir it was opened on. A path outside the
data dir (a model directory of the user's) stays absolute. A relative path is read as the data dir's
only when its first part is one of :data:`DATA_FOLDERS`, so a model id such as ``Qwen/Qwen3-8B``
is never taken for one.

Rows written before this rule hold absolute paths, possibly under the data dir's old place (``mv dd
dd-moved``, a copy, a backup restored elsewhere): :meth:`DataPaths.migrated` finds the data-dir part
of such a path (the last ``<folder>/...`` tail that exists under the data dir now), and the start-up
migration (:meth:`opd_nb.server.store.Store.migrate_paths`) rewrites them once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

DATA_FOLDERS = ("jobs", "files", "functions", "uploads", "deployments")
PATH_KEYS = frozenset(  # the keys of a job's meta JSON that hold paths (at any depth)
    {"student_path", "teacher_path", "train_file", "validation_file", "code_dir", "resume_from",
     "final_checkpoint", "best_checkpoint"}
)  # fmt: skip


class DataPaths:
    """The one translation between the paths callers use and the paths rows hold."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self._roots = list(dict.fromkeys((data_dir, data_dir.resolve())))

    def stored(self, path: str | Path) -> str:
        """How a row holds `path`: relative to the data dir when it lies in one of its folders."""
        for root in self._roots:
            try:
                rel = Path(path).relative_to(root)
            except ValueError:
                continue
            if rel.parts and rel.parts[0] in DATA_FOLDERS:
                return rel.as_posix()
        return str(path)

    def absolute(self, text: str) -> str:
        """The path a row's `text` names, under this data dir when it is one of its relative paths."""
        parts = PurePosixPath(text).parts
        if parts and parts[0] in DATA_FOLDERS and not PurePosixPath(text).is_absolute():
            return str(self.data_dir.joinpath(*parts))
        return text

    def migrated(self, text: str) -> str:
        """`text` as this rule stores it, for a row an older server wrote (an absolute path, maybe under
        the data dir's old place): the last ``<folder>/...`` tail of it that exists here."""
        stored = self.stored(text)
        if stored != text or not PurePosixPath(text).is_absolute():
            return stored
        parts = PurePosixPath(text).parts
        for i in range(len(parts) - 1, 0, -1):
            if parts[i] in DATA_FOLDERS and self.data_dir.joinpath(*parts[i:]).exists():
                return PurePosixPath(*parts[i:]).as_posix()
        return text


def map_path_keys(value: Any, change: Callable[[str], str]) -> Any:
    """`value` (a job meta's JSON) with every string under a :data:`PATH_KEYS` key passed through `change`."""
    if isinstance(value, dict):
        return {
            k: change(v) if k in PATH_KEYS and isinstance(v, str) else map_path_keys(v, change)
            for k, v in value.items()  # pyright: ignore[reportUnknownVariableType]
        }
    if isinstance(value, list):
        return [map_path_keys(v, change) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value
