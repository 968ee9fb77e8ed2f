"""How the local control plane answers a job, read back through the SDK's own response class."""

from __future__ import annotations

from http import HTTPStatus

from dashscope.finetune.customize_types import FineTune

from opd_nb.server.job.views import job_output
from opd_nb.server.store.job_record import JobFunction, JobMeta, JobRecord


def _job(functions: list[dict]) -> JobRecord:
    meta = JobMeta(
        training_type="pg_opd",
        student_path="student",
        teacher_path="teacher",
        train_file="train.jsonl",
        functions=[JobFunction(processor="", code_dir="", **f) for f in functions],
    )
    return JobRecord(
        job_id="ft-1",
        seq=1,
        job_name="my-opd-job-1a2b3c4d",
        status="RUNNING",
        request={"model": "qwen3.5-9b", "teacher_model": "qwen3.5-397b-a17b", "training_type": "pg_opd"},
        meta=meta,
        create_time="2026-01-01 00:00:00",
    )


def test_seed_002_reads_entity_id_from_the_run_result():
    """Issue 26, defect 14: `result.output.entity_id` after registration (rw-/ro-), as seed 002 does."""
    functions = [
        {"name": "rollout-1", "kind": "rollout", "entity_id": "ro-123"},
        {"name": "reward-1", "kind": "reward", "entity_id": "rw-456"},
    ]
    result = FineTune(status_code=HTTPStatus.OK, output=job_output(_job(functions)).wire())
    assert result.output.entity_id == "ro-123" and result.output.job_id == "ft-1"
    assert [f["entity_id"] for f in result.output.local["functions"]] == ["ro-123", "rw-456"]
    pure = FineTune(status_code=HTTPStatus.OK, output=job_output(_job([])).wire())
    assert pure.output.entity_id is None  # pure distillation registered nothing: None, not AttributeError
