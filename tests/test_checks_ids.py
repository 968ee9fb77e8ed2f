"""Identifiers with a documented form (opd_nb.spec.ids) where another kind belongs: job, checkpoint,
file, entity and instance ids, a local output model, a URL: each planted, found at file:line, fixed."""

from __future__ import annotations

import pytest
from test_checks_config import REWARD_FUNCTIONS, config_text, make_workspace

from opd_nb.checks import RULES, check_config_text
from opd_nb.spec.ids import entity_kind, id_kind, job_of

JOB = "ft-202601051230-3fa2c1"


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


def test_the_documented_forms_are_told_apart():
    assert [id_kind(x) for x in (JOB, f"{JOB}:checkpoint-20", "file-ft-9ddb037ad3ab", "rw-7ac6a27a3294")] == [
        "job",
        "checkpoint",
        "file",
        "entity",
    ]
    assert [id_kind(x) for x in ("rw-ins-0a1b", f"opd-local/{JOB}", "qwen3.5-9b", "data/train.jsonl")] == [
        "instance",
        "local-output",
        None,
        None,
    ]
    assert [entity_kind(x) for x in ("ro-1", "rw-1", "grw-1", "x-1")] == [
        "rollout",
        "reward",
        "group_reward",
        None,
    ]
    assert job_of(f"{JOB}:checkpoint-20") == job_of(f"opd-local/{JOB}") == JOB


VALIDATION = "  - type: validation\n    data_source_type: file_id\n    file_name: data/validation.jsonl\n"
# (case id, planted edits, rule, severity, text of the line it points at, text in the fix, target)
CASES = [
    ("job-id-as-student", {"  name: qwen3.5-9b": f"  name: {JOB}"}, "config.id-wrong-kind", "error", f"name: {JOB}", f"opd status {JOB}", "cloud"),
    ("job-id-as-student-locally", {"  name: qwen3.5-9b": f"  name: {JOB}"}, "config.id-wrong-kind", "error", f"name: {JOB}", "finetuned_output", "local"),
    ("checkpoint-as-teacher", {"teacher_model: qwen3.5-397b-a17b": f"teacher_model: {JOB}:checkpoint-20"}, "config.id-wrong-kind", "error", "teacher_model:", f"opd export {JOB}", "cloud"),
    ("file-id-as-student", {"  name: qwen3.5-9b": "  name: file-ft-9ddb037ad3ab"}, "config.id-wrong-kind", "error", "name: file-ft", "datasets[].file_id", "cloud"),
    ("local-output-on-the-cloud", {"  name: qwen3.5-9b": f"  name: opd-local/{JOB}"}, "config.model-id-not-cloud", "error", "name: opd-local", "Bailian model id", "cloud"),
    ("local-output-as-teacher", {"teacher_model: qwen3.5-397b-a17b": f"teacher_model: opd-local/{JOB}"}, "config.finetuned-teacher", "warning", "teacher_model:", "larger than the student", "local"),
    ("file-id-in-file-name", {"    file_name: data/validation.jsonl": "    file_name: file-ft-9ddb037ad3ab"}, "config.id-wrong-kind", "error", "file_name: file-ft", "file_id: file-ft-9ddb037ad3ab", "cloud"),
    ("path-in-file-id", {VALIDATION: "  - type: validation\n    file_id: data/validation.jsonl\n"}, "config.id-wrong-kind", "error", "file_id: data/", "file_name: data/train.jsonl", "cloud"),
    ("job-id-in-file-id", {VALIDATION: f"  - type: validation\n    file_id: {JOB}\n"}, "config.id-wrong-kind", "error", "file_id: ft-", "file_id takes the id", "cloud"),
    ("odd-file-id", {VALIDATION: "  - type: validation\n    file_id: 9ddb037ad3ab\n"}, "config.id-wrong-kind", "warning", "file_id: 9ddb", "copy the id", "cloud"),
    ("file-id-beside-file-name", {"    file_name: data/validation.jsonl": "    file_name: data/validation.jsonl\n    file_id: file-ft-1"}, "config.dataset-source-fields", "warning", "file_id: file-ft-1", "only file_id", "cloud"),
    ("path-as-download-url", {VALIDATION: "  - type: validation\n    data_source_type: download_url\n    download_url: data/validation.jsonl\n"}, "config.id-wrong-kind", "error", "download_url: data/", "https://", "cloud"),
    ("url-on-a-file-dataset", {"    file_name: data/validation.jsonl": "    file_name: data/validation.jsonl\n    download_url: https://x.invalid/v.jsonl"}, "config.dataset-source-fields", "warning", "download_url:", "data_source_type: download_url", "cloud"),
    ("mount-without-bucket", {VALIDATION: "  - type: validation\n    data_source_type: oss_mount\n    mount_storage: {region: cn-beijing, file_path: v.jsonl}\n"}, "config.dataset-source-missing", "error", "mount_storage:", "bucket", "cloud"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("planted", "rule", "severity", "at", "fix", "target"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_planted_identifier_of_the_wrong_kind(tmp_path, planted, rule, severity, at, fix, target):
    assert rule in RULES
    ws = make_workspace(tmp_path)
    text = config_text(replace=planted)
    report = check_config_text(text, ws, target=target, base_url="http://127.0.0.1:9/api/v1")
    hits = report.by_rule(rule)
    assert hits, f"{rule} not reported:\n{report}"
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if at in ln)
    assert (hits[0].severity, hits[0].where) == (severity, f"config.yaml:{line}"), str(report)
    assert fix in hits[0].fix, hits[0].fix
    assert (
        rule
        not in check_config_text(
            config_text(), ws, target=target, base_url="http://127.0.0.1:9/api/v1"
        ).rules()
    )


ENTITY = {"    weight: 1.0\n": "    weight: 1.0\n    entity_id: {id}\n"}


@pytest.mark.parametrize(
    ("entity", "severity", "words"),
    [
        ("ro-2036cd4d54c7", "error", "is a rollout entity (ro-…), but this function is a reward"),
        ("rw-ins-5c2d1e", "error", "function instance id"),
        ("my-reward", "warning", "does not have an entity id's form"),
        ("grw-5c2d1e0a", "warning", "has the group_reward prefix (grw-…), but this function is a reward"),
    ],
    ids=["rollout-id-on-a-reward", "instance-id", "no-entity-form", "group-reward-id-on-a-reward"],
)
def test_entity_id_of_another_function_kind(tmp_path, entity, severity, words):
    ws = make_workspace(tmp_path, reward=True)
    text = config_text(
        functions=REWARD_FUNCTIONS.replace("    weight: 1.0\n", f"    weight: 1.0\n    entity_id: {entity}\n")
    )
    (f,) = check_config_text(text, ws).by_rule("config.id-wrong-kind")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "entity_id:" in ln)
    assert (f.severity, f.where) == (severity, f"config.yaml:{line}") and words in f.message, f
    ok = config_text(
        functions=REWARD_FUNCTIONS.replace(
            "    weight: 1.0\n", "    weight: 1.0\n    entity_id: rw-7ac6a27a3294\n"
        )
    )
    assert "config.id-wrong-kind" not in check_config_text(ok, ws).rules()


def test_a_reward_entity_on_the_rollout_is_refused(tmp_path):
    ws = make_workspace(tmp_path)
    rollout = REWARD_FUNCTIONS.replace("type: reward", "type: rollout").replace(
        "    weight: 1.0\n", "    entity_id: rw-1a2b3c\n"
    )
    (f,) = check_config_text(config_text(functions=rollout), ws).by_rule("config.id-wrong-kind")
    assert "reward entity (rw-…), but this function is a rollout" in f.message and "ro-" in f.fix


@pytest.mark.parametrize(
    ("name", "noted"),
    [("my-opd-job-6afe0698", True), (JOB, True), ("my-opd-job-20260105", False), ("my-opd-job", False)],
)
def test_a_name_copied_from_a_submitted_job_is_a_note(tmp_path, name, noted):
    ws = make_workspace(tmp_path)
    report = check_config_text(config_text(replace={"name: my-opd-job": f"name: {name}"}), ws)
    found = report.by_rule("config.job-name-suffix")
    assert bool(found) == noted, str(report)
    if noted:
        assert (
            found[0].severity == "info"
            and found[0].where == "config.yaml:1"
            and "-<8 hex>" in found[0].message
        )
