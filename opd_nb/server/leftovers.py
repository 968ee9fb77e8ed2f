"""Partial files a killed server left: removed at the next start, before anything is served.

Each write path writes to a temporary name and renames (or links) it into place, so a ``kill -9``
mid-write leaves only the temporary: a zip upload's ``uploads/*.part-*``, a dataset upload's
``files/.tmp-*``, an unpacking registration's ``functions/<id>/code.tmp`` (or a whole
``functions/<id>/`` whose registration never reached the database). None of them is referenced by
any record, and they can be large (a 43 MB zip), so the next start removes them and says so.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

PARTIAL_PATTERNS = (("uploads", "*.part-*"), ("files", ".tmp-*"), ("functions", "*/code.tmp"))


def reap_partial_files(data_dir: Path, is_registered: Callable[[str], bool]) -> list[Path]:
    """Remove what interrupted writes left under ``data_dir``; returns the removed paths.

    ``is_registered(entity_id)``: whether a ``functions/<entity_id>`` directory belongs to a function
    the store knows (one it does not know is a registration cut off before its row was written)."""
    removed = [p for folder, pattern in PARTIAL_PATTERNS for p in (data_dir / folder).glob(pattern)]
    functions = data_dir / "functions"
    for entry in functions.iterdir() if functions.is_dir() else ():
        if entry.is_dir() and not is_registered(entry.name) and entry not in removed:
            removed.append(entry)
    for path in removed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return removed
