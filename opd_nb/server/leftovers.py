"""Partial files a killed server left: removed at the next start, before anything is served, and only
the ones the database names.

Each write path writes to a temporary name and renames (or links) it into place: a zip upload's
``uploads/*.part-*``, a dataset upload's ``files/.tmp-*`` (then ``files/<file_id>/``), a registration's
``functions/<id>/``. Before it creates one it names it in the database's journal of unfinished writes
(:class:`~opd_nb.server.store.functions.WriteRows`), and strikes it off in the transaction that records
the finished thing. So a ``kill -9`` mid-write leaves a file the journal names, and the next start
removes exactly those (they can be large: a 43 MB zip) and says so. Nothing else is removed: not a
directory no record mentions (the database may be an older backup, or the user's own file), and not
anything when there is no database at all (:mod:`opd_nb.server.db_safety` refuses that start).
"""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath

WRITE_FOLDERS = ("uploads", "files", "functions")  # where a journaled write may create something


def reap_partial_files(data_dir: Path, unfinished: list[str]) -> list[Path]:
    """Remove what the journal's ``unfinished`` writes (paths relative to ``data_dir``) left; returns
    the paths that were there. A journal entry outside :data:`WRITE_FOLDERS` is never followed."""
    removed: list[Path] = []
    for rel in unfinished:
        parts = PurePosixPath(rel).parts
        if (
            len(parts) < 2
            or parts[0] not in WRITE_FOLDERS
            or ".." in parts
            or PurePosixPath(rel).is_absolute()
        ):
            continue
        path = data_dir.joinpath(*parts)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists() or path.is_symlink():
            path.unlink(missing_ok=True)
        else:
            continue
        removed.append(path)
    return removed
