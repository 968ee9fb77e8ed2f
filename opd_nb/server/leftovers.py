"""Partial files a killed server left: removed at the next start, before anything is served, and only
the ones the database's journal names and no record holds.

Each write path writes to a temporary name and renames (or links) it into place: a zip upload's
``uploads/*.part-*``, a dataset upload's ``files/.tmp-*`` (then ``files/<file_id>/``), a registration's
``functions/<id>/``. Before it creates one it names it in the database's journal of unfinished writes
(:class:`~opd_nb.server.store.functions.WriteRows`), and strikes it off in the transaction that records
the finished thing. So a ``kill -9`` mid-write leaves a file the journal names, and the next start
removes exactly those (they can be large: a 43 MB zip) and says so. Nothing else is removed: not a
directory no record mentions (the database may be an older backup, or the user's own file), not
anything when there is no database at all (:mod:`opd_nb.server.db_safety` refuses that start), and not
a journaled path that a record still names (a file, an upload, a function): the journal and the
records disagree (a restored backup, a hand edit), and the record wins: the path is kept and the
conflict is said, so ``GET /files/<id>`` never answers for a file that start-up deleted.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

WRITE_FOLDERS = ("uploads", "files", "functions")  # where a journaled write may create something


@dataclass
class Reaped:
    """What the start-up sweep did: the paths it removed, and the journaled ones it kept (and why)."""

    removed: list[Path] = field(default_factory=list[Path])
    kept: list[tuple[Path, str]] = field(default_factory=list[tuple[Path, str]])


def _holder(path: Path, named: Mapping[Path, str]) -> str | None:
    """The record that holds `path` (names it, a file inside it, or a folder around it), if any."""
    for held, what in named.items():
        if held == path or path in held.parents or held in path.parents:
            return f"{what} names {held}"
    return None


def reap_partial_files(data_dir: Path, unfinished: list[str], named: Mapping[Path, str]) -> Reaped:
    """Remove what the journal's ``unfinished`` writes (paths relative to ``data_dir``) left, except what
    a record in `named` (absolute path -> the record, in words) holds. A journal entry outside
    :data:`WRITE_FOLDERS` is never followed."""
    out = Reaped()
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
        if not (path.exists() or path.is_symlink()):
            continue
        holder = _holder(path, named)
        if holder is not None:
            out.kept.append((path, holder))
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            out.removed.append(path)
        else:
            path.unlink(missing_ok=True)
            out.removed.append(path)
    return out
