"""Hyper-parameters typed from the body to the engine (issue 38): one `TrainingPlan`, read from the spec's
table once at each process boundary (the control plane's body, the engine's job), carried whole from the
job record to the engine, read by the notebook from the typed job; one steps formula."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from opd_nb.client.job_results import Job
from opd_nb.engine import hparams
from opd_nb.engine.api import EngineError, EngineJob
from opd_nb.notebook.job_state import JobState, progress_of
from opd_nb.paid.estimate import training_steps as estimate_steps
from opd_nb.server.bodies import JobBody
from opd_nb.server.store.job_record import JobMeta, JobRecord
from opd_nb.server.worker import engine_job
from opd_nb.spec.hyperparams import HP, params_in
from opd_nb.spec.training_plan import HyperParameterError, TrainingPlan, training_steps

SUBMITTED = {"learning_rate": "1e-6", "n_epochs": 3.0, "max_length": 512, "batch_size": "8", "unknown": 1}
BODY = {
    "model": "qwen3-8b",
    "teacher_model": "qwen3-max",
    "training_type": "pg_opd",
    "training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": "file-1"}],
    "hyper_parameters": SUBMITTED,
}


def test_the_plan_has_every_key_of_the_table_with_its_default():
    assert set(TrainingPlan.model_fields) == {p.name for p in params_in(HP)}
    plan = TrainingPlan.from_submitted(None)
    assert {p.name: getattr(plan, p.name) for p in params_in(HP)} == {
        p.name: p.default for p in params_in(HP)
    }


def test_a_plan_is_read_as_the_service_reads_it():
    plan = TrainingPlan.from_submitted(SUBMITTED)
    assert (plan.learning_rate, plan.n_epochs, plan.batch_size) == (1e-6, 3, 8)  # YAML's strings, 3.0
    assert plan.max_prompt_length == 511  # only max_length given: prompts may use all but one token
    assert not hasattr(plan, "unknown")  # the service ignores a key it does not know


def test_every_problem_is_named_with_its_key_value_and_fix():
    with pytest.raises(HyperParameterError) as exc:
        TrainingPlan.from_submitted({"n_epochs": 1000, "lr_scheduler_type": "warmup", "batch_size": 2.5})
    text = str(exc.value)
    for part in ("hyper_parameters.n_epochs = 1000", "lr_scheduler_type = 'warmup'", "batch_size = 2.5"):
        assert part in text
    assert text.endswith("fix training.hyper_parameters in config.yaml")


def test_the_body_is_read_once_into_the_plan_and_keeps_what_was_sent():
    body = JobBody.model_validate(BODY)
    assert body.plan == TrainingPlan.from_submitted(SUBMITTED)
    assert body.hyper_parameters == SUBMITTED  # echoed back as sent, as Bailian does
    with pytest.raises(ValidationError, match=r"hyper_parameters\.n_epochs = 1000"):
        JobBody.model_validate({**BODY, "hyper_parameters": {"n_epochs": 1000}})


def _record(plan: TrainingPlan | None, request_hp: dict) -> JobRecord:
    meta = JobMeta(
        training_type="pg_opd", plan=plan, student_path="s", teacher_path="t", train_file="train.jsonl"
    )
    return JobRecord(
        job_id="ft-1",
        seq=1,
        job_name="j",
        status="PENDING",
        request={"hyper_parameters": request_hp},
        meta=meta,
        create_time="2026-01-01 00:00:00",
    )


def test_the_record_keeps_the_plan_and_the_engine_gets_the_same_one(tmp_path: Path):
    """Stored as JSON in the job row, then handed to the engine's process as JSON: the same plan arrives."""
    plan = JobBody.model_validate(BODY).plan
    stored = JobRecord.model_validate_json(_record(plan, SUBMITTED).model_dump_json())
    assert stored.plan == plan
    job = engine_job(tmp_path, stored, [], None)
    assert job.hyper_parameters == plan
    arrived = EngineJob.model_validate_json(job.model_dump_json())
    assert arrived.hyper_parameters == plan
    local = hparams.resolve(arrived.hyper_parameters, student_params=10**9)
    assert (local.n_epochs, local.batch_size, local.max_prompt_length) == (3, 8, 511)


def test_a_row_from_before_the_plan_is_read_from_its_request():
    assert _record(None, SUBMITTED).plan == TrainingPlan.from_submitted(SUBMITTED)


def test_the_engine_boundary_refuses_what_the_table_refuses():
    """A job handed to the engine directly (not through the control plane) is read the same way."""
    base = {"job_id": "x", "student_path": "s", "teacher_path": "t", "train_file": "f", "output_dir": "o"}
    with pytest.raises(ValidationError, match=r"hyper_parameters\.n_epochs = 1000"):
        EngineJob.model_validate({**base, "hyper_parameters": {"n_epochs": 1000}})
    with pytest.raises(EngineError, match=r"ppo_mini_batch_size = 64 exceeds"):
        hparams.resolve({"batch_size": 2, "n_rollouts": 2}, student_params=1)


def _template_steps(rows: int, batch: int, epochs: int, tmp_path: Path) -> int:
    path = Path(__file__).parents[1] / "template" / "{{cookiecutter.workspace_slug}}" / "submit_job.py"
    spec = importlib.util.spec_from_file_location("template_submit_job_steps", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    train = tmp_path / f"train-{rows}.jsonl"
    train.write_text(
        "".join(json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n" for _ in range(rows))
    )
    job = {
        "job_name": "j",
        "model": "m",
        "teacher_model": "t",
        "hyper_parameters": {"batch_size": batch, "n_epochs": epochs},
        "resources": {},
        "training_datasets": [{"file_name": str(train)}],
    }
    return int(re.search(r"= (\d+) steps", module.start_line(job)).group(1))  # type: ignore[union-attr]


@pytest.mark.parametrize(("rows", "batch", "epochs"), [(16, 8, 1), (21, 8, 3), (33, 16, 2), (1, 128, 5)])
def test_one_steps_formula_and_the_templates_copy_agrees(rows, batch, epochs, tmp_path):
    steps = training_steps(rows, batch, epochs)
    assert steps == -(-rows // batch) * epochs
    assert estimate_steps(rows, batch, epochs) == steps
    assert (
        TrainingPlan.from_submitted(
            {"batch_size": batch, "n_epochs": epochs, "ppo_mini_batch_size": 8}
        ).steps(rows)
        == steps
    )
    assert _template_steps(rows, batch, epochs, tmp_path) == steps  # it runs without opd-nb: its own copy


# ---- the notebook reads the typed job -------------------------------------------------------------
def _cloud_job(hp: dict) -> Job:
    """A job as Bailian answers it: no progress, no local extras, the hyper-parameters echoed as sent."""
    return Job.from_output({"job_id": "ft-1", "status": "RUNNING", "hyper_parameters": hp})


def test_the_monitor_reads_n_epochs_from_the_typed_job_on_the_cloud():
    rows = [{"step": s, "epoch": 0} for s in (1, 2, 3)]
    st = JobState("ft-1", status="RUNNING", job=_cloud_job({"n_epochs": "3"}), metrics=rows)
    got = progress_of(st)
    assert got["n_epochs"] == 3 and got["total_steps"] is None  # the first epoch is not over yet
    st.metrics = rows + [{"step": 4, "epoch": 1}]
    assert progress_of(st)["total_steps"] == 9  # 3 steps an epoch, x 3 epochs


def test_the_monitor_prefers_the_progress_and_plan_the_local_plane_reports():
    plan = TrainingPlan.from_submitted({"n_epochs": 2}).model_dump()
    out = {
        "job_id": "ft-1",
        "status": "RUNNING",
        "hyper_parameters": {"n_epochs": "nonsense"},  # the typed plan, read at submission, wins
        "progress": {"step": 2, "total_steps": 8, "epoch": 0, "n_epochs": 0, "eta_s": 12.0},
        "local": {"plan": plan},
    }
    got = progress_of(JobState("ft-1", status="RUNNING", job=Job.from_output(out), metrics=[{"step": 2}]))
    assert (got["n_epochs"], got["total_steps"], got["eta_s"]) == (2, 8, 12.0)
