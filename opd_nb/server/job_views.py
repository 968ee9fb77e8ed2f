"""How a stored job is answered: Bailian's job shape, and its checkpoints in Bailian's listing shape."""

from __future__ import annotations

from pathlib import Path

from opd_nb.constants import FAILED, SUCCEEDED


def _file_ids(datasets: list[dict] | None) -> list[str]:
    return [d.get("file_id") for d in datasets or [] if d.get("file_id")]


def job_output(job: dict) -> dict:
    """A job as Bailian answers it: every field dashscope's FineTuneOutput declares, plus local extras."""
    req, meta = job["request"], job["meta"]
    functions = meta.get("functions") or []
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
        # Seed 002 reads `result.output.entity_id` after the first run (rw-/ro-): the first function's id.
        "entity_id": next((f.get("entity_id") for f in functions if f.get("entity_id")), None),
        "local": {
            "substitutions": meta.get("substitutions", []),
            "student_path": meta.get("student_path"),
            "teacher_path": meta.get("teacher_path"),
            "final_checkpoint": meta.get("final_checkpoint"),
            "functions": [  # the registered functions the job runs (a reused entity shows up here)
                {"name": f.get("name"), "type": f.get("kind"), "entity_id": f.get("entity_id")}
                for f in functions
            ],
        },
    }
    if job["status"] == FAILED:
        out["code"] = job.get("code") or "JobFailed"
        out["message"] = job.get("message") or ""
    elif job.get("message"):
        out["message"] = job["message"]
    return out


def checkpoint_listing(job: dict, checkpoints: list[dict]) -> list[dict]:
    """The saved checkpoints in Bailian's "list checkpoints" shape, the published one marked.

    Each entry has Bailian's fields (``checkpoint_id``, ``checkpoint``, ``full_name``, ``job_id``,
    ``step``, ``status``, ``create_time``, ``model_name``: the id to deploy or continue from, which
    is the job's ``finetuned_output`` for the published checkpoint and the checkpoint's path for the
    others); the local extras (``path``, ``metrics``, ``published``) are under ``local``.
    """
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
    job_id = job["job_id"]
    return [
        {
            "checkpoint_id": f"{job_id}-{cp['name']}",
            "checkpoint": cp["name"],
            "full_name": f"{job_id}-{cp['name']}",
            "job_id": job_id,
            "step": cp["step"],
            "status": SUCCEEDED,
            "create_time": cp["created_at"],
            "model_name": job.get("finetuned_output") if cp["published"] else cp["path"],
            "local": {"path": cp["path"], "metrics": cp["metrics"], "published": cp["published"]},
        }
        for cp in checkpoints
    ]
