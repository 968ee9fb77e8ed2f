"""What deleting a job does on disk: its directory goes, except what something still serves from.

A job's directory holds its dataset copies, logs, metrics, rollouts and checkpoints (several MB even
for a tiny job), so a delete that only hid the row left them for good. A checkpoint that a live
deployment serves, or that was exported under a model name (which stays deployable), is kept, and
the delete answer says which paths were kept and why; everything else is removed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from opd_nb.wire.jobs import DeletedFiles, KeptPath


def job_dir(data_dir: Path, job_id: str) -> Path:
    return data_dir / "jobs" / job_id


def remove_job_files(data_dir: Path, job_id: str, keep: dict[str, str]) -> DeletedFiles:
    """Remove ``jobs/<job_id>`` but the paths in ``keep`` (path -> why) that lie inside it."""
    root = job_dir(data_dir, job_id).resolve()
    kept = {Path(p).resolve(): why for p, why in keep.items()}
    kept = {p: why for p, why in kept.items() if p.is_relative_to(root) and p.exists()}
    freed = _remove_all_but(root, set(kept)) if root.is_dir() else 0
    return DeletedFiles(
        freed_bytes=freed, kept=[KeptPath(path=str(p), why=w) for p, w in sorted(kept.items())]
    )


def _remove_all_but(root: Path, keep: set[Path]) -> int:
    """Delete everything under ``root`` except the ``keep`` subtrees (and their parents); bytes freed."""
    freed = 0
    for entry in list(root.iterdir()):
        if entry in keep:
            continue
        if any(k.is_relative_to(entry) for k in keep):
            freed += _remove_all_but(entry, keep)
            continue
        freed += _size(entry)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    if not keep or not any(k.is_relative_to(root) for k in keep):
        shutil.rmtree(root, ignore_errors=True)
    return freed


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
