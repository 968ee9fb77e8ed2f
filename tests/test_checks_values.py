"""Issue 42: values with a documented set (teacher ids, resources, the teacher's serving values however
set) and the docs' advice (checkpoints kept and scored, continued training read against the parent job).
Planted in hand-written workspaces; the continued-training cases read a real parent on `opd serve`."""

from __future__ import annotations

import pytest
from test_checks_config import REWARD_FUNCTIONS, config_text, make_workspace
from test_checks_contracts import _env, line_of, only  # noqa: F401 (_env: the autouse fixture)

from opd_nb.checks import check_config_text
from opd_nb.spec.models import OPD_TEACHER_IDS, family, placeholder

UNREACHABLE = "http://127.0.0.1:9/api/v1"


# ---------------------------------------------------------------- the teacher: documented ids, placeholders


@pytest.mark.parametrize("target", ["cloud", "local"])
@pytest.mark.parametrize("teacher", ["your-teacher-model-id", "<teacher-model>", "TEACHER_MODEL_ID", "xxx"])
def test_a_placeholder_teacher_is_an_error_on_every_target(tmp_path, target, teacher):
    """Seed 001's snippet run verbatim: the local plane would train its stand-in and hide the blank."""
    ws = make_workspace(tmp_path)
    text = config_text(replace={"teacher_model: qwen3.5-397b-a17b": f'teacher_model: "{teacher}"'})
    rep = check_config_text(text, ws, target, base_url=UNREACHABLE)
    hit = only(rep, "config.model-placeholder")
    assert hit.severity == "error" and not rep.ok
    assert hit.where == f"config.yaml:{line_of(text, 'teacher_model:')}" and "placeholder" in hit.message
    assert hit.fix.startswith(f"write a Bailian model id, e.g. teacher_model: {OPD_TEACHER_IDS[0]}")
    assert "config.teacher-undocumented" not in rep.rules()  # one finding for one blank


def test_a_placeholder_student_is_an_error_too(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(replace={"name: qwen3.5-9b": "name: your-student-model"})
    hit = only(check_config_text(text, ws), "config.model-placeholder")
    assert hit.where == "config.yaml:3" and "model.name" in hit.message


def test_an_undocumented_cloud_teacher_warns_with_the_documented_list(tmp_path):
    """A Bailian model the docs do not name as an OPD teacher: a warning (the service may refuse it)."""
    ws = make_workspace(tmp_path)
    text = config_text(replace={"teacher_model: qwen3.5-397b-a17b": "teacher_model: qwen3-max"})
    rep = check_config_text(text, ws)
    hit = only(rep, "config.teacher-undocumented")
    assert hit.severity == "warning" and hit.where == f"config.yaml:{line_of(text, 'teacher_model:')}"
    assert "documented: qwen3.5-397b-a17b" in hit.message and "qwen3.5-397b-a17b" in hit.fix
    family_hit = only(rep, "config.teacher-family")  # the docs' hard constraint: tokenizers align
    assert "(qwen3)" in family_hit.message and "(qwen3.5)" in family_hit.message
    local = check_config_text(text, ws, "local", base_url=UNREACHABLE)
    assert "config.teacher-undocumented" not in local.rules()  # locally it runs on the stand-in
    assert "config.teacher-undocumented" not in check_config_text(config_text(), ws).rules()


@pytest.mark.parametrize("target", ["cloud", "local"])
@pytest.mark.parametrize("teacher", ["meta-llama-3-70b-instruct", "totally-made-up-model", "qwen9-999b"])
def test_a_teacher_bailian_does_not_have_is_an_error_on_every_target(tmp_path, target, teacher):
    """The FAQ's teacher_model error: a model ID not registered in Bailian; the local plane refuses it too."""
    ws = make_workspace(tmp_path)
    text = config_text(replace={"teacher_model: qwen3.5-397b-a17b": f"teacher_model: {teacher}"})
    rep = check_config_text(text, ws, target, base_url=UNREACHABLE)
    hit = only(rep, "config.teacher-unknown")
    assert hit.severity == "error" and hit.where == f"config.yaml:{line_of(text, 'teacher_model:')}"
    assert "not a model id Bailian documents" in hit.message and "qwen3.5-397b-a17b" in hit.fix
    assert not {"config.teacher-undocumented", "config.teacher-family"} & rep.rules()  # one finding


def test_a_teacher_of_another_qwen_series_is_another_family(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(replace={"teacher_model: qwen3.5-397b-a17b": "teacher_model: qwen3-235b-a22b"})
    rules = check_config_text(text, ws).rules()
    assert {"config.teacher-family", "config.teacher-undocumented"} <= rules


def test_model_id_helpers():
    assert placeholder("your-teacher-model-id") and placeholder("<teacher>") and placeholder("model-id")
    assert not any(placeholder(m) for m in ("qwen3.5-397b-a17b", "qwen3-max", "meta-llama-3-70b-instruct"))
    assert family("qwen3.5-9b") == family("qwen3.5-397b-a17b") == "qwen3.5" and family("qwen3-8b") == "qwen3"


# ---------------------------------------------------------------- resources against the documented values


@pytest.mark.parametrize(
    "old,new,severity",
    [
        ("charge_type: mtu_postpaid", "charge_type: free", "error"),
        ("charge_type: mtu_postpaid", "charge_type: mtu_prepaid", "warning"),
        ("mtu_spec_code: MTU4", "mtu_spec_code: BOGUS", "error"),
        ("mtu_spec_code: MTU4", "mtu_spec_code: MTU8", "warning"),
    ],
)
def test_resources_outside_the_documented_values(tmp_path, old, new, severity):
    ws = make_workspace(tmp_path)
    text = config_text(replace={old: new})
    hit = only(check_config_text(text, ws), "config.undocumented-value")
    assert hit.severity == severity and hit.where == f"config.yaml:{line_of(text, new)}"
    assert hit.fix.startswith(f"write {old}")
    assert "config.undocumented-value" not in check_config_text(config_text(), ws).rules()


# ---------------------------------------------------------------- one rule for a value, however it was set


@pytest.mark.parametrize(
    "name,written,value",
    [
        ("opd_teacher_max_model_len", "8192", "8192"),
        ("opd_teacher_max_num_batched_tokens", "8192", "8192"),
        ("opd_teacher_gpu_memory_utilization", "0.9", "0.9"),
    ],
)
def test_the_teacher_preset_rule_reads_the_value_written_out_or_left_to_the_default(
    tmp_path, name, written, value
):
    """The table's default is what the job (and the estimate) gets when the key is left out."""
    ws = make_workspace(tmp_path)
    set_text = config_text(extra_hp=f"{name}: {written}\n")
    unset_text = set_text.replace(f"    {name}: {written}\n", "")
    set_hit = only(check_config_text(set_text, ws), "config.teacher-preset")
    unset_hits = [
        h for h in check_config_text(unset_text, ws).by_rule("config.teacher-preset") if name in h.message
    ]
    assert len(unset_hits) == 1, check_config_text(unset_text, ws)
    unset_hit = unset_hits[0]
    assert (
        f"{name} {value} is" in set_hit.message
        and f"{name} {value} (not set: the default) is" in unset_hit.message
    )
    assert set_hit.fix == unset_hit.fix and set_hit.severity == unset_hit.severity == "warning"
    assert set_hit.where == f"config.yaml:{line_of(set_text, name)}"
    assert unset_hit.where == f"config.yaml:{line_of(unset_text, 'hyper_parameters:')}"


# ---------------------------------------------------------------- the docs' advice on checkpoints


@pytest.mark.parametrize("limit,kind", [(1, "only the newest 1"), (2, "only the newest 2"), (8, "up to 8")])
def test_save_total_limit_outside_three_to_five_gets_a_note(tmp_path, limit, kind):
    ws = make_workspace(tmp_path)
    text = config_text(extra_hp=f"save_total_limit: {limit}\n")
    hit = only(check_config_text(text, ws), "config.save-total-limit")
    assert hit.severity == "info" and hit.where == f"config.yaml:{line_of(text, 'save_total_limit')}"
    assert kind in hit.message and "3-5" in hit.fix
    for fine in (3, 5):
        assert (
            "config.save-total-limit"
            not in check_config_text(config_text(extra_hp=f"save_total_limit: {fine}\n"), ws).rules()
        )


def test_save_steps_that_miss_the_evaluations_warn_with_the_unscored_count(tmp_path):
    """120 rows / batch 16 = 8 steps: eval_steps 2, save_steps 3 saves 3 and 6; only 6 is evaluated."""
    ws = make_workspace(tmp_path, reward=True)
    text = config_text(functions=REWARD_FUNCTIONS, extra_hp="save_steps: 3\n")
    hit = only(check_config_text(text, ws), "config.save-steps-unscored")
    assert hit.severity == "warning" and hit.where == f"config.yaml:{line_of(text, 'save_steps')}"
    assert "save_steps 3 is not a multiple of eval_steps 2" in hit.message
    assert "Of the 2 checkpoint(s) it keeps (steps 3, 6), only 6 will have one." in hit.message
    assert hit.fix.startswith("set save_steps: 4 (a multiple of eval_steps") and "4-6" in hit.fix
    never = config_text(functions=REWARD_FUNCTIONS, extra_hp="save_steps: 5\n")
    assert "none has one" in only(check_config_text(never, ws), "config.save-steps-unscored").message
    fine = config_text(functions=REWARD_FUNCTIONS, extra_hp="save_steps: 4\n")
    assert "config.save-steps-unscored" not in check_config_text(fine, ws).rules()
    pure = config_text(extra_hp="save_steps: 3\n")  # no reward: the loss is measured at every step
    assert "config.save-steps-unscored" not in check_config_text(pure, ws).rules()


# ---------------------------------------------------------------- continued training, read against the parent


def test_continued_training_says_when_the_parent_cannot_be_read(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(replace={"name: qwen3.5-9b": "name: opd-local/ft-202601011200-abcd"})
    hit = only(check_config_text(text, ws, "local", base_url=UNREACHABLE), "config.continued-training")
    assert hit.severity == "info" and "could not be read (no control plane answers at" in hit.message
    assert hit.fix.startswith("set learning_rate: 5.0e-07")


@pytest.mark.slow
def test_continued_training_reads_the_parents_learning_rate_on_the_plane(
    tmp_path, finished_job, local_server, monkeypatch
):
    parent = finished_job("pure-distill").job
    parent_lr = float(parent.hyper_parameters["learning_rate"])
    ws = make_workspace(tmp_path)
    same = config_text(replace={"name: qwen3.5-9b": f"name: {parent.finetuned_output}"})
    rep = check_config_text(same, ws, "local", base_url=local_server.api_base)
    hit = only(rep, "config.continued-training")
    assert hit.severity == "warning" and f"continues job {parent.job_id}" in hit.message
    assert f"its learning_rate {parent_lr:g}" in hit.message and "not lower than the parent's" in hit.message
    assert hit.where == f"config.yaml:{line_of(same, 'learning_rate')}"
    assert hit.fix == f"set learning_rate: {parent_lr / 2:.1e} (half the parent's {parent_lr:g})"
    lower = same.replace("learning_rate: 1.0e-6", f"learning_rate: {parent_lr / 4:.1e}")
    hit = only(
        check_config_text(lower, ws, "local", base_url=local_server.api_base), "config.continued-training"
    )
    assert hit.severity == "info" and "is lower, as the docs advise" in hit.message
    # A Bailian job's detail shows its hyper-parameters too: the cloud target reads the same GET (the local
    # plane standing in for Bailian, configured as the user's cloud: the only URL the cloud key goes to),
    # finding the parent by the job id in the model id.
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", local_server.api_base)
    cloud = config_text(replace={"name: qwen3.5-9b": f"name: {parent.job_id}:checkpoint-2"})
    hit = only(
        check_config_text(cloud, ws, "cloud", base_url=local_server.api_base), "config.continued-training"
    )
    assert hit.severity == "warning" and f"continues job {parent.job_id}" in hit.message
