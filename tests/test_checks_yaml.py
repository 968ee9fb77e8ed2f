"""What PyYAML (the SDK's loader) accepts in config.yaml but the author did not mean: each planted in a
hand-written workspace, found at its file:line with its fix, and the fixed file clean of that rule.

The family (dashscope-sdk.md §4.1: the SDK loads with ``yaml.SafeLoader``, YAML 1.1): repeated keys,
tabs, a second document, YAML 1.1 booleans/octal/base-60/dates where text or a number is meant, empty
values (null), merges of several anchors, a BOM, bytes that are not UTF-8, keys one level off, numbers
written as text, and another trainer's name for a key.
"""

from __future__ import annotations

import pytest
import yaml
from test_checks_config import REWARD_FUNCTIONS, config_text, make_workspace

from opd_nb.checks import RULES, check, check_config_text


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


def line_of(text: str, needle: str, nth: int = 1) -> int:
    """1-based line of the nth line containing `needle`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return hits[nth - 1]


VALIDATION = "  - type: validation\n    data_source_type: file_id\n    file_name: data/validation.jsonl\n"
# (case id, planted edits, rule, severity, (needle, nth) of the line it must point at, text the fix holds,
#  fixed edits that must clear the rule)
CASES = [
    (
        "duplicate-hyper-parameter",
        {"    n_epochs: 1\n": "    n_epochs: 1\n    n_epochs: 3\n"},
        "config.yaml-duplicate-key",
        "error",
        ("n_epochs: 3", 1),
        "delete one of them",
        {"    n_epochs: 1\n": "    n_epochs: 3\n"},
    ),
    (
        "duplicate-same-value",
        {"    batch_size: 16\n": "    batch_size: 16\n    batch_size: 16\n"},
        "config.yaml-duplicate-key",
        "warning",
        ("batch_size: 16", 2),
        "delete one of them",
        {},
    ),
    (
        "duplicate-training-block",  # the whole first block is dropped without a word
        {"  resources:\n": "  resources:\n    mtu_capacity: 24\ntraining:\n  type: pg_opd\n  resources:\n"},
        "config.yaml-duplicate-key",
        "error",
        ("training:", 2),
        "merge their keys into one",
        {},
    ),
    (
        "bool-word-for-a-choice",
        {"    eval_steps: 2\n": "    eval_steps: 2\n    save_strategy: no\n"},
        "config.yaml-implicit-type",
        "error",
        ("save_strategy: no", 1),
        'save_strategy: "no"',
        {"    eval_steps: 2\n": '    eval_steps: 2\n    save_strategy: "no"\n'},
    ),
    (
        "bool-word-job-name",
        {"name: my-opd-job": "name: yes"},
        "config.yaml-implicit-type",
        "error",
        ("name: yes", 1),
        'name: "yes"',
        {"name: my-opd-job": 'name: "yes"'},
    ),
    (
        "date-job-name",
        {"name: my-opd-job": "name: 2026-01-05"},
        "config.yaml-implicit-type",
        "error",
        ("name: 2026-01-05", 1),
        'name: "2026-01-05"',
        {"name: my-opd-job": 'name: "2026-01-05"'},
    ),
    (
        "number-as-student-id",
        {"  name: qwen3.5-9b": "  name: 123"},
        "config.yaml-implicit-type",
        "error",
        ("name: 123", 1),
        'name: "123"',
        {},
    ),
    (
        "bool-key",
        {"    eval_steps: 2\n": "    eval_steps: 2\n    on: 3\n"},
        "config.yaml-implicit-type",
        "error",
        ("on: 3", 1),
        '"on":',
        {},
    ),
    (
        "octal",
        {"    n_epochs: 1\n": "    n_epochs: 010\n"},
        "config.yaml-number-form",
        "error",
        ("n_epochs: 010", 1),
        "write 10",
        {"    n_epochs: 1\n": "    n_epochs: 10\n"},
    ),
    (
        "base-60",
        {"    eval_steps: 2": "    eval_steps: 1:30"},
        "config.yaml-number-form",
        "error",
        ("eval_steps: 1:30", 1),
        "quote it if it is text",
        {},
    ),
    (
        "yaml-1.2-octal",
        {"    eval_steps: 2": "    eval_steps: 0o2"},
        "config.yaml-number-form",
        "error",
        ("eval_steps: 0o2", 1),
        "write 2",
        {"    eval_steps: 2": "    eval_steps: 2"},
    ),
    (
        "env-value-with-leading-zero",
        {
            "training:\n": REWARD_FUNCTIONS.rstrip("\n")
            + "\n    runtime:\n      env: {ZIP: 01234}\ntraining:\n"
        },
        "config.yaml-number-form",
        "error",
        ("ZIP: 01234", 1),
        "write 1234",
        {},
    ),
    (
        "empty-hyper-parameter",
        {"    eval_steps: 2": "    eval_steps:"},
        "config.yaml-null-value",
        "warning",
        ("eval_steps:", 1),
        "write its value",
        {},
    ),
    (
        "tilde-hyper-parameter",
        {"    learning_rate: 1.0e-6": "    learning_rate: ~"},
        "config.yaml-null-value",
        "warning",
        ("learning_rate: ~", 1),
        "write its value",
        {},
    ),
    (
        "empty-model-block",
        {"model:\n  name: qwen3.5-9b\n": "model:\n"},
        "config.yaml-null-value",
        "error",
        ("model:", 1),
        "write its mapping",
        {},
    ),
    (
        "second-document",
        {"  resources:\n": "  resources:\n    mtu_capacity: 24\n---\nname: other\n"},
        "config.yaml-multiple-documents",
        "error",
        ("---", 1),
        "delete that `---` line",
        {},
    ),
    (
        "tab-indentation",
        {"    batch_size: 16": "\tbatch_size: 16"},
        "config.yaml-tab",
        "error",
        ("batch_size: 16", 1),
        "spaces",
        {},
    ),
    (
        "hyper-parameter-one-level-out",
        {"  resources:\n": "  n_epochs: 2\n  resources:\n"},
        "config.misplaced-key",
        "error",
        ("n_epochs: 2", 1),
        "under `training.hyper_parameters`",
        {},
    ),
    (
        "hyper-parameter-at-the-top",
        {"model:\n": "max_length: 2048\nmodel:\n"},
        "config.misplaced-key",
        "error",
        ("max_length: 2048", 1),
        "under `training.hyper_parameters`",
        {},
    ),
    (
        "runtime-field-on-the-function",
        {"training:\n": REWARD_FUNCTIONS + "    concurrency: 20\ntraining:\n"},
        "config.misplaced-key",
        "error",
        ("concurrency: 20", 1),
        "`runtime:` of a function",
        {},
    ),
    (
        "quoted-number",
        {"learning_rate: 1.0e-6": 'learning_rate: "1.0e-6"'},
        "config.numeric-string",
        "info",  # the official Bailian CLI sends the learning rate as a string itself
        ("learning_rate:", 1),
        "learning_rate: 1.0e-06",
        {},
    ),
    (
        "no-break-space-in-teacher-id",  # pasted from a web page: looks right, matches no model
        {"teacher_model: qwen3.5-397b-a17b": "teacher_model: qwen3.5-397b-a17b\u00a0"},
        "config.yaml-invisible-character",
        "error",
        ("teacher_model:", 1),
        "retype it as 'qwen3.5-397b-a17b'",
        {},
    ),
    (
        "zero-width-space-in-key",
        {"    batch_size: 16": "    batch\u200b_size: 16"},
        "config.yaml-invisible-character",
        "error",
        ("_size: 16", 1),
        "retype it as 'batch_size'",
        {},
    ),
    (
        "spaces-inside-quotes",
        {"  name: qwen3.5-9b": '  name: " qwen3.5-9b"'},
        "config.yaml-invisible-character",
        "error",
        ('name: " qwen3.5-9b', 1),
        "retype it as 'qwen3.5-9b'",
        {"  name: qwen3.5-9b": '  name: "qwen3.5-9b"'},
    ),
    (
        "full-width-colon",
        {"    batch_size: 16": "    batch_size\uff1a16"},
        "config.yaml-syntax",
        "error",
        ("batch_size\uff1a16", 1),
        "full-width colon",
        {},
    ),
    (
        "no-space-after-colon",
        {"    batch_size: 16": "    batch_size:16"},
        "config.yaml-syntax",
        "error",
        ("batch_size:16", 1),
        "with a space after the colon",
        {},
    ),
    (
        "hyper-parameters-as-a-list",
        {
            "    learning_rate: 1.0e-6\n    lr_scheduler_type: cosine\n    n_epochs: 1\n    batch_size: 16\n"
            "    n_rollouts: 8\n    ppo_mini_batch_size: 32\n    eval_steps: 2\n": "    - learning_rate: 1.0e-6\n"
            "    - n_epochs: 1\n"
            "    - opd_teacher_max_model_len: 16384\n    - opd_teacher_max_num_batched_tokens: 16384\n"
            "    - opd_teacher_gpu_memory_utilization: 0.85\n"
        },
        "config.yaml-block-shape",
        "error",
        ("- learning_rate", 1),
        "remove the `- `",
        {},
    ),
    (
        "datasets-without-dashes",
        {
            "  - type: training\n    data_source_type: file_id\n    file_name: data/train.jsonl\n"
            + VALIDATION: ("  type: training\n  data_source_type: file_id\n  file_name: data/train.jsonl\n")
        },
        "config.yaml-block-shape",
        "error",
        ("type: training", 1),
        "with `- `",
        {},
    ),
    (
        "exponent-without-sign",  # a dot but no sign: still text for YAML 1.1
        {"    eval_steps: 2\n": "    eval_steps: 2\n    kl_loss_coef: 1.0e3\n"},
        "config.numeric-string",
        "warning",  # the docs do not say whether Bailian reads a string here
        ("kl_loss_coef: 1.0e3", 1),
        "kl_loss_coef: 1000.0 (no quotes",
        {"    eval_steps: 2\n": "    eval_steps: 2\n    kl_loss_coef: 1000.0\n"},
    ),
    (
        "trl-name",  # no spelling is near n_rollouts: the other trainer's name is what finds it
        {"    n_rollouts: 8": "    num_generations: 8"},
        "config.unknown-hyperparameter",
        "error",
        ("num_generations: 8", 1),
        "`n_rollouts`? (OPD's name for it)",
        {},
    ),
    (
        "verl-name",
        {"    eval_steps: 2": "    test_freq: 2"},
        "config.unknown-hyperparameter",
        "error",
        ("test_freq: 2", 1),
        "`eval_steps`",
        {},
    ),
    (
        "short-name",
        {"    learning_rate: 1.0e-6": "    lr: 1.0e-6"},
        "config.unknown-hyperparameter",
        "error",
        ("lr: 1.0e-6", 1),
        "`learning_rate`",
        {},
    ),
]


@pytest.mark.parametrize(
    ("planted", "rule", "severity", "at", "fix", "fixed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_planted_yaml_mistake_is_found_at_its_line_with_its_fix(
    tmp_path, planted, rule, severity, at, fix, fixed
):
    assert rule in RULES
    ws = make_workspace(tmp_path)
    text = config_text(replace=planted)
    report = check_config_text(text, ws)
    hits = report.by_rule(rule)
    assert hits, f"{rule} not reported:\n{report}"
    assert hits[0].severity == severity, str(report)
    assert hits[0].where == f"config.yaml:{line_of(text, *at)}", str(report)
    assert fix in hits[0].fix, hits[0].fix
    assert not report.by_rule("config.schema"), f"the same mistake explained twice:\n{report}"
    if fixed:
        good = check_config_text(config_text(replace=fixed), ws)
        assert rule not in good.rules(), str(good)


def test_a_block_whose_keys_lost_their_indentation_says_where_they_belong(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text()
    block = text[text.index("  hyper_parameters:\n") : text.index("  resources:\n")]
    dedented = block.replace("\n    ", "\n  ")
    report = check_config_text(text.replace(block, dedented), ws)
    (empty,) = report.by_rule("config.yaml-null-value")
    assert empty.severity == "error" and empty.where == f"config.yaml:{line_of(text, 'hyper_parameters:')}"
    assert "learning_rate" in empty.message and "indent learning_rate" in empty.fix
    moved = report.by_rule("config.misplaced-key")
    assert {f.message.split("`")[1] for f in moved} >= {"learning_rate", "n_epochs", "batch_size"}


def test_a_line_indented_into_nowhere_names_both_lines(tmp_path):
    ws = make_workspace(tmp_path)
    text = config_text(replace={"    n_epochs: 1\n": "      n_epochs: 1\n"})
    (f,) = check_config_text(text, ws).by_rule("config.yaml-syntax")
    line = line_of(text, "n_epochs: 1")
    assert f.where == f"config.yaml:{line}"
    assert f"line {line} is indented deeper than line {line - 1}" in f.fix


def test_merge_of_two_anchors_that_bring_one_key_warns_and_a_plain_merge_is_clean(tmp_path):
    ws = make_workspace(tmp_path)
    datasets = (
        "datasets:\n"
        "  - &train\n    type: training\n    data_source_type: file_id\n    file_name: data/train.jsonl\n"
        "  - <<: *train\n    type: validation\n    file_name: data/validation.jsonl\n"
    )
    text = config_text()
    start, end = text.index("datasets:\n"), text.index("training:\n")
    clean = check_config_text(text[:start] + datasets + text[end:], ws)
    assert clean.ok and not [f for f in clean.findings if f.rule.startswith("config.")], str(clean)
    conflicting = datasets.replace(
        "  - <<: *train\n    type: validation\n",
        "  - &val\n    type: validation\n    data_source_type: file_id\n    file_name: data/validation.jsonl\n"
        "  - <<: [*train, *val]\n",
    )
    merged = text[:start] + conflicting + text[end:]
    warned = check_config_text(merged, ws).by_rule("config.yaml-merge-conflict")
    assert warned and warned[0].where == f"config.yaml:{line_of(merged, '<<: [*train, *val]')}"
    assert "first" in warned[0].message


def test_a_bom_is_read_as_the_sdk_reads_it(tmp_path):
    """PyYAML drops a UTF-8 byte-order mark (the SDK opens the file as UTF-8): no finding, same lines."""
    text = config_text(replace={"ppo_mini_batch_size: 32": "ppo_mini_batch_size: 512"})
    ws = make_workspace(tmp_path, config="\ufeff" + text)
    report = check(ws)
    assert [f.rule for f in report.findings] == ["config.mini-batch-too-large"], str(report)
    assert report.findings[0].where == f"config.yaml:{line_of(text, 'ppo_mini_batch_size: 512')}"


@pytest.mark.parametrize(
    ("encoding", "words"), [("gbk", "not UTF-8 text"), ("utf-16", "UTF-16")], ids=["gbk", "utf-16"]
)
def test_a_config_that_is_not_utf8_names_the_line_and_the_fix(tmp_path, encoding, words):
    text = config_text(replace={"name: my-opd-job": "name: 蒸馏实验"})
    ws = make_workspace(tmp_path)
    (ws / "config.yaml").write_bytes(text.encode(encoding))
    (f,) = check(ws).findings
    assert f.rule == "config.yaml-encoding" and words in f.message and "UTF-8" in f.fix
    if encoding == "gbk":
        assert f.where.endswith(f"config.yaml:{line_of(text, 'name:')}:7"), f.where
    from opd_nb.cli import main

    with pytest.raises(SystemExit) as exited:  # the other verbs say the same, never a traceback
        main(["estimate", str(ws)])
    assert exited.value.code == 2


def test_every_yaml_rule_fix_loads_to_what_the_field_needs(tmp_path):
    """The quoted fix of an implicit type reads back as text, the octal fix as the number meant."""
    ws = make_workspace(tmp_path)
    text = config_text(replace={"    eval_steps: 2\n": "    eval_steps: 2\n    save_strategy: off\n"})
    (f,) = check_config_text(text, ws).by_rule("config.yaml-implicit-type")
    assert yaml.safe_load(f.fix.removeprefix("quote it: ")) == {"save_strategy": "off"}
    assert "false" in f.message


def test_windows_line_endings_keep_the_lines(tmp_path):
    text = config_text(replace={"ppo_mini_batch_size: 32": "ppo_mini_batch_size: 512"})
    ws = make_workspace(tmp_path)
    (ws / "config.yaml").write_bytes(text.replace("\n", "\r\n").encode())
    report = check(ws)
    assert [f.rule for f in report.findings] == ["config.mini-batch-too-large"], str(report)
    assert report.findings[0].where == f"config.yaml:{line_of(text, 'ppo_mini_batch_size: 512')}"
