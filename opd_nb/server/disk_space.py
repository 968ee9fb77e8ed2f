"""A full disk under the data dir: how it is recognised, explained, and survived.

Documented choice: a job whose worker dies on a full disk **fails with the reason** (no space left,
the data dir, how much is free, its largest directories, what to free); it is not held for
later, because nothing frees the space by itself and a held job would look stuck. To make that
last write possible when the disk is full, the server keeps a small reserve file
(:data:`RESERVE_FILE`, :data:`RESERVE_BYTES`) in the data dir and deletes it before recording the
failure; each start (and the next settled job) makes it again. Write endpoints answer a full disk
with Bailian's error shape and HTTP 507 (``InsufficientStorage``) with the same reason.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
from pathlib import Path

RESERVE_FILE = ".space-reserve"
RESERVE_BYTES = 4 * 2**20  # room for the failure's log lines and status, and SQLite's journal
LOW_SPACE_BYTES = 2**20  # less than this free under the data dir reads as a full disk
DISK_FULL = "InsufficientStorage"
DISK_FULL_STATUS = 507
_FULL_TEXT = ("no space left on device", "database or disk is full", "disk quota exceeded")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed for want of space (OSError ENOSPC/EDQUOT, SQLITE_FULL)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, sqlite3.Error) and "disk is full" in str(exc).lower()


def mentions_full_disk(lines: list[str]) -> bool:
    return any(text in line.lower() for line in lines for text in _FULL_TEXT)


def low_space(data_dir: Path) -> bool:
    try:
        return shutil.disk_usage(data_dir).free < LOW_SPACE_BYTES
    except OSError:
        return False


def ensure_reserve(data_dir: Path) -> None:
    """Make the reserve file, if there is room (quietly not, on a disk that is already full)."""
    path = data_dir / RESERVE_FILE
    if path.is_file() and path.stat().st_size >= RESERVE_BYTES:
        return
    try:
        with open(path, "wb") as fh:
            fh.write(b"\0" * RESERVE_BYTES)
    except OSError:
        path.unlink(missing_ok=True)


def release_reserve(data_dir: Path) -> None:
    (data_dir / RESERVE_FILE).unlink(missing_ok=True)


def _largest(data_dir: Path, n: int = 3) -> list[tuple[Path, int]]:
    sizes: list[tuple[Path, int]] = []
    for folder in ("jobs", "functions", "files", "uploads", "deployments"):
        for entry in (data_dir / folder).iterdir() if (data_dir / folder).is_dir() else ():
            total = sum(p.lstat().st_size for p in entry.rglob("*") if p.is_file()) if entry.is_dir() else 0
            sizes.append((entry, total if entry.is_dir() else entry.lstat().st_size))
    return sorted(sizes, key=lambda item: -item[1])[:n]


def full_disk_reason(data_dir: Path) -> str:
    """One message: no space left, where, how much is free, the largest directories, what to free."""
    try:
        usage = shutil.disk_usage(data_dir)
        free = f"{usage.free / 2**20:.1f} MiB free of {usage.total / 2**20:.0f} MiB"
    except OSError:
        free = "free space unknown"
    biggest = ", ".join(f"{p} ({size / 2**20:.1f} MiB)" for p, size in _largest(data_dir) if size)
    return (
        f"no space left on device: the disk holding the data dir {data_dir} is full ({free}). "
        f"Largest there: {biggest or 'nothing of ours'}. Free space on that disk (delete finished jobs "
        "with `DELETE /fine-tunes/{job_id}`, or whatever filled it), or run `opd serve --data-dir` on a "
        "bigger disk, then submit the job again"
    )
