"""How a stored job is answered: Bailian's job shape, and the local-only checkpoint listing."""

from __future__ import annotations

from pathlib import Path

from opd_nb.constants import FAILED


def _file_ids(datasets: list[dict] | None) -> list[str]:
    return [d.get("file_id") for d in datasets or [] if d.get("file_id")]


def job_output(job: dict) -> dict:
    """A job as Bailian answers it: every field dashscope's FineTuneOutput declares, plus local extras."""
    req, meta = job["request"], job["meta"]
    out = {
        "job_id": job["job_id"],
        "job_name": job["job_name"],
        "status": job["status"],
        "model": req.get("model"),
        "base_model": req.get("model"),
        "finetuned_output": job.get("finetuned_output"),
        "training_file_ids": _file_ids(req.get("training_datasets")),
        "validation_file_ids": _file_ids(req.get("validation_datasets")),
        "hyper_parameters": req.get("hyper_parameters") or {},
        "training_type": req.get("training_type"),
        "teacher_model": req.get("teacher_model"),
        "create_time": job["create_time"],
        "end_time": job.get("end_time"),
        "start_time": job.get("start_time"),
        "user_identity": "local",
        "modifier": "local",
        "creator": "local",
        "group": "llm",
        "usage": None,
        "progress": job.get("progress"),
        "local": {
            "substitutions": meta.get("substitutions", []),
            "student_path": meta.get("student_path"),
            "teacher_path": meta.get("teacher_path"),
            "final_checkpoint": meta.get("final_checkpoint"),
        },
    }
    if job["status"] == FAILED:
        out["code"] = job.get("code") or "JobFailed"
        out["message"] = job.get("message") or ""
    elif job.get("message"):
        out["message"] = job["message"]
    return out


def checkpoint_listing(job: dict, checkpoints: list[dict]) -> dict:
    """The saved checkpoints, marking the published one (the job's ``finetuned_output``)."""
    meta = job["meta"]
    final = meta.get("final_checkpoint")
    for cp in checkpoints:
        cp["published"] = bool(final) and Path(cp["path"]).resolve() == Path(final).resolve()
    if final and not any(cp["published"] for cp in checkpoints):
        checkpoints.append(
            {
                "name": Path(final).name,
                "step": int(meta.get("steps") or 0),
                "path": final,
                "created_at": job.get("end_time"),
                "metrics": meta.get("metrics_tail") or {},
                "published": True,
            }
        )
    return {
        "job_id": job["job_id"],
        "checkpoints": checkpoints,
        "finetuned_output": job.get("finetuned_output"),
        "final_checkpoint": final,
    }
