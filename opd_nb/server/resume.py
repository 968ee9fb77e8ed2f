"""Where an interrupted job picks up: its last complete checkpoint, and a record rewound to match it.

The engine saves ``checkpoint-N`` atomically (a temporary directory renamed into place) with the
model, optimizer, scheduler, RNG state and data cursor, and resumes from one exactly
(``EngineJob.resume_from``). A job cut off after step N + k has already reported steps past N, so
before it runs again everything past N is dropped: metric rows (store and ``metrics.jsonl``),
checkpoint rows without a directory, recorded rollouts, and the progress the watchers see. Then
every series has unique, increasing steps, and the replayed steps write them once more.
Checkpoint retention is the engine's and still holds: it counts the directories on disk.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import JsonValue

from opd_nb.engine.api import METRICS_FILE
from opd_nb.engine.checkpoints import STATE_FILE  # what makes a checkpoint resumable
from opd_nb.server.store import Store
from opd_nb.server.store.job_record import JobRecord

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_ROLLOUT_FILE = re.compile(r"^\w+-(\d+)\.json\.gz$")  # opd_nb.engine.rollouts.file_name


@dataclass(frozen=True)
class ResumePoint:
    """A complete checkpoint to resume from (step 0 and no path: start over)."""

    step: int
    path: str | None

    @property
    def name(self) -> str:
        return Path(self.path).name if self.path else "step 0"


def output_dir(data_dir: Path, job_id: str) -> Path:
    return data_dir / "jobs" / job_id / "output"


def latest_checkpoint(out: Path) -> ResumePoint:
    """The newest complete checkpoint on disk (a directory with its trainer state)."""
    best = ResumePoint(0, None)
    root = out / "checkpoints"
    for path in root.glob("checkpoint-*") if root.is_dir() else ():
        match = _CHECKPOINT.match(path.name)
        if match and (path / STATE_FILE).is_file() and (path / "config.json").is_file():
            step = int(match.group(1))
            if step > best.step:
                best = ResumePoint(step, str(path))
    return best


def continue_hint(point: ResumePoint) -> str:
    """How the user carries on by hand, for a job that will not resume by itself."""
    if point.path is None:
        return "It saved no checkpoint: submit it again to retrain."
    return (
        f"Its last checkpoint is {point.path} (step {point.step}): pass that path as `model` in a new "
        "job to continue training from it."
    )


def rewind(store: Store, data_dir: Path, job: JobRecord) -> ResumePoint:
    """Make the job's record and output match its last checkpoint; returns where it resumes."""
    job_id = job.job_id
    out = output_dir(data_dir, job_id)
    for tmp in (out / "checkpoints").glob(".tmp-checkpoint-*"):
        shutil.rmtree(tmp, ignore_errors=True)  # a save cut off before its rename
    shutil.rmtree(out / ".tmp-final", ignore_errors=True)
    point = latest_checkpoint(out)
    keep = point.step if point.path else -1  # no checkpoint: drop even the step-0 evaluation
    if point.path and not any(c["step"] == point.step for c in store.checkpoints(job_id)):
        store.add_checkpoint(job_id, point.step, Path(point.path).name, point.path, {})  # saved, unrecorded
    store.drop_steps_after(job_id, keep)
    _truncate_metrics(out / METRICS_FILE, keep)
    _drop_rollouts(out / "rollouts", keep)
    progress, total = job.progress, job.progress.total_steps if job.progress else 0
    rewound = (
        progress.model_copy(
            update={"step": point.step, "percent": round(100.0 * point.step / total, 1), "eta_s": None}
        )
        if progress is not None and point.path and total
        else None
    )
    store.set_job(job_id, progress=rewound)
    store.update_meta(job_id, lambda meta: meta.with_resume(resume_from=point.path))
    return point


def _truncate_metrics(path: Path, keep: int) -> None:
    """Keep the rows of steps <= ``keep`` (atomically; a torn last line is dropped too)."""
    if not path.is_file():
        return
    rows: list[str] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row: JsonValue = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(step := row.get("step", 0), int | float) and step <= keep:
            rows.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{r}\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def _drop_rollouts(root: Path, keep: int) -> None:
    for path in root.glob("*.json.gz") if root.is_dir() else ():
        match = _ROLLOUT_FILE.match(path.name)
        if match and int(match.group(1)) > keep:
            path.unlink(missing_ok=True)
