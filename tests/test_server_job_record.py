"""The job record is typed across the server and its worker, and a data dir an older server wrote still loads."""

from __future__ import annotations

import json
import sqlite3

from opd_nb.server.store import Store
from opd_nb.server.store.job_record import JobFunction, JobMeta, JobProgress, ResumeState, TrainingOutcome
from opd_nb.server.worker import engine_job
from opd_nb.spec.training_plan import TrainingPlan

# A meta exactly as the previous version wrote it: a free-form dict, resume state and outcome at the top.
LEGACY_META = {
    "training_type": "pg_opd",
    "student_path": "/models/student",
    "teacher_path": "/models/teacher",
    "substitutions": ["student model 'qwen3-8b' runs locally on the stand-in"],
    "train_file": "/data/files/train.jsonl",
    "validation_file": None,
    "functions": [
        {
            "entity_id": "rw-1",
            "kind": "reward",
            "name": "reward-1",
            "processor": "reward.Exact",
            "code_dir": "/data/functions/rw-1",
            "weight": 0.5,
            "timeout": None,
            "concurrency": 4,
            "reward_metric_weight": None,
            "env": {"MODE": "strict"},
        }
    ],
    "student_kind": "stand-in",
    "base_model": "qwen3-8b",
    "parents": ["ft-0"],
    "interruptions": 2,
    "resume_from": "/data/jobs/ft-1/output/checkpoints/checkpoint-4",
    "final_checkpoint": "/data/jobs/ft-1/output/final",
    "steps": 8,
    "epochs": 2,
    "metrics_tail": {"validation/accuracy": 0.75},
}


def _legacy_row(data_dir, job_id: str) -> None:
    """Insert a row the way the previous store did (its JSON columns written by json.dumps)."""
    with sqlite3.connect(Store(data_dir).path) as conn:
        conn.execute(
            "INSERT INTO jobs(job_id, seq, job_name, status, request, meta, create_time, progress) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (
                job_id,
                1,
                "old",
                "RUNNING",
                json.dumps({"model": "opd-local/ft-0", "hyper_parameters": {"n_epochs": 2}}),
                json.dumps(LEGACY_META),
                "2026-01-01 00:00:00",
                json.dumps(
                    {"step": 4, "total_steps": 8, "epoch": 1, "n_epochs": 2, "eta_s": 3.0, "percent": 50.0}
                ),
            ),
        )


def test_a_row_written_by_the_previous_version_loads_typed(tmp_path):
    _legacy_row(tmp_path, "ft-1")
    job = Store(tmp_path).job("ft-1")
    assert job is not None and job.status == "RUNNING" and job.cancel_requested is False
    assert job.meta.resume == ResumeState(interruptions=2, resume_from=LEGACY_META["resume_from"])
    assert job.meta.outcome == TrainingOutcome(
        final_checkpoint="/data/jobs/ft-1/output/final",
        steps=8,
        epochs=2,
        metrics_tail={"validation/accuracy": 0.75},
    )
    (function,) = job.meta.functions
    assert function.kind == "reward" and function.env == {"MODE": "strict"}
    assert function.call_options() == {"concurrency": 4}
    assert job.progress == JobProgress(step=4, total_steps=8, epoch=1, n_epochs=2, eta_s=3.0, percent=50.0)
    assert job.base_model == "qwen3-8b" and job.meta.parents == ["ft-0"]


def test_the_worker_builds_its_engine_job_from_the_record(tmp_path):
    _legacy_row(tmp_path, "ft-1")
    job = Store(tmp_path).job("ft-1")
    built = engine_job(tmp_path, job, [], None)
    assert built.student_path == "/models/student" and built.train_file == "/data/files/train.jsonl"
    assert built.resume_from == LEGACY_META["resume_from"]
    assert built.hyper_parameters == TrainingPlan.from_submitted({"n_epochs": 2})  # read from the request
    assert built.output_dir == str(tmp_path / "jobs" / "ft-1" / "output")


def test_meta_updates_are_typed_and_kept(tmp_path):
    store = Store(tmp_path)
    meta = JobMeta(
        training_type="pg_opd",
        student_path="/s",
        teacher_path="/t",
        train_file="/f.jsonl",
        functions=[JobFunction(entity_id="ro-1", kind="rollout", name="r", processor="p.R", code_dir="/c")],
    )
    store.insert_job("ft-2", "new", {"model": "qwen3-8b"}, meta)
    store.update_meta("ft-2", lambda m: m.with_resume(interruptions=1))
    store.update_meta("ft-2", lambda m: m.with_resume(resume_from="/ckpt"))  # keeps the count
    store.set_job("ft-2", progress=JobProgress(step=1, total_steps=4))
    job = store.job("ft-2")
    assert job.status == "PENDING" and job.meta.resume == ResumeState(interruptions=1, resume_from="/ckpt")
    assert job.meta.functions == meta.functions and job.meta.outcome is None
    assert job.progress == JobProgress(step=1, total_steps=4)
    assert job.base_model == "qwen3-8b"  # no parent chain: the requested model
