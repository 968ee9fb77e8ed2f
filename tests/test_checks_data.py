"""Data rules: each planted in a hand-written workspace (with line numbers), and the clean case."""

from __future__ import annotations

import json

import pytest
from test_checks_config import REWARD_FUNCTIONS, config_text, make_workspace, write_rows

from opd_nb.checks import check
from opd_nb.engine.task import make_rows


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


def data_rules(report) -> set[str]:
    return {f.rule for f in report.findings if f.rule.startswith("data.")}


def test_clean_data_has_no_data_findings(tmp_path):
    report = check(make_workspace(tmp_path, reward=True))
    assert data_rules(report) == set(), str(report)


BAD_LINES = [
    ("data.bad-json", '{"messages": [{"role": "user", "content": "1"}],}', "Expecting property name"),
    ("data.not-object", '["user", "hi"]', "list"),
    ("data.missing-messages", '{"prompt": "hi"}', "no `messages` key"),
    ("data.empty-messages", '{"messages": []}', ""),
    ("data.bad-message", '{"messages": ["hi"]}', "message 0"),
    ("data.unknown-role", '{"messages": [{"role": "human", "content": "hi"}]}', "'human'"),
    (
        "data.role-order",
        '{"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]}',
        "system message at position 1",
    ),
    (
        "data.role-order",
        '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}',
        "last message is an assistant turn",
    ),
    (
        "data.role-order",
        '{"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]}',
        "tool message",
    ),
    ("data.no-user-turn", '{"messages": [{"role": "system", "content": "Sort the digits."}]}', ""),
    ("data.empty-content", '{"messages": [{"role": "user", "content": "  "}]}', "message 0 (user)"),
    ("data.empty-content", '{"messages": [{"role": "user"}]}', "no content"),
    ("data.blank-line", "   ", ""),
]


@pytest.mark.parametrize(
    "rule,line,detail", BAD_LINES, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(BAD_LINES)]
)
def test_bad_row_reported_with_line_number(tmp_path, rule, line, detail):
    ws = make_workspace(tmp_path)
    train = ws / "data" / "train.jsonl"
    lines = train.read_text(encoding="utf-8").splitlines()
    lines.insert(6, line)  # becomes line 7
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    hits = check(ws).by_rule(rule)
    assert hits, rule
    assert hits[0].where == "data/train.jsonl:7"
    assert detail in hits[0].message
    assert "1 row(s), lines 7" in hits[0].message


def test_many_bad_rows_are_grouped_with_first_line_numbers(tmp_path):
    ws = make_workspace(tmp_path)
    train = ws / "data" / "train.jsonl"
    lines = train.read_text(encoding="utf-8").splitlines()
    for i in (3, 10, 20, 30, 40, 50, 60):
        lines[i - 1] = '{"messages": [{"role": "user", "content": ""}]}'
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    hits = check(ws).by_rule("data.empty-content")
    assert len(hits) == 1
    assert "7 row(s), lines 3, 10, 20, 30, 40, ..." in hits[0].message


def test_missing_solution_only_matters_with_a_reward(tmp_path):
    ws = make_workspace(tmp_path, reward=True)
    train = ws / "data" / "train.jsonl"
    rows = [json.loads(x) for x in train.read_text(encoding="utf-8").splitlines()]
    for i in (4, 9):
        del rows[i]["rollout_extra"]
    write_rows(train, rows)
    hit = check(ws).by_rule("data.missing-solution")[0]
    assert hit.where == "data/train.jsonl:5" and "2 of 120" in hit.message and "lines 5, 10" in hit.message
    (ws / "config.yaml").write_text(config_text(), encoding="utf-8")  # pure distillation: solution unused
    assert "data.missing-solution" not in check(ws).rules()


def test_validation_missing_or_empty(tmp_path):
    ws = make_workspace(tmp_path)
    no_val = config_text(
        replace={
            "  - type: validation\n    data_source_type: file_id\n    file_name: data/validation.jsonl\n": ""
        }
    )
    (ws / "config.yaml").write_text(no_val, encoding="utf-8")
    assert check(ws).by_rule("data.no-validation")[0].severity == "warning"
    (ws / "config.yaml").write_text(config_text(), encoding="utf-8")
    (ws / "data" / "validation.jsonl").write_text("", encoding="utf-8")
    rep = check(ws)
    assert rep.by_rule("data.no-validation") and rep.by_rule("data.empty-file")
    write_rows(ws / "data" / "validation.jsonl", make_rows(5, seed=99))
    assert "data.no-validation" not in check(ws).rules()


def test_rows_in_both_training_and_validation(tmp_path):
    ws = make_workspace(tmp_path)
    train_rows = [json.loads(x) for x in (ws / "data" / "train.jsonl").read_text().splitlines()]
    val = [json.loads(x) for x in (ws / "data" / "validation.jsonl").read_text().splitlines()]
    write_rows(ws / "data" / "validation.jsonl", val + [train_rows[7], train_rows[0]])
    hit = check(ws).by_rule("data.overlap")[0]
    assert hit.message.startswith("2 validation prompt(s)")
    assert "data/validation.jsonl:13 = data/train.jsonl:8" in hit.message


def test_prompt_over_max_prompt_length(tmp_path):
    ws = make_workspace(tmp_path)
    train = ws / "data" / "train.jsonl"
    rows = [json.loads(x) for x in train.read_text().splitlines()]
    rows[11]["messages"][1]["content"] = "7" * 700  # ~200 estimated tokens
    write_rows(train, rows)
    tight = config_text(extra_hp="max_prompt_length: 64\nmax_length: 256\n")
    (ws / "config.yaml").write_text(tight, encoding="utf-8")
    hit = check(ws).by_rule("data.prompt-too-long")[0]
    assert hit.where == "data/train.jsonl:12" and "1 prompt(s) over max_prompt_length 64" in hit.message
    roomy = config_text(extra_hp="max_prompt_length: 512\nmax_length: 1024\n")
    (ws / "config.yaml").write_text(roomy, encoding="utf-8")
    assert "data.prompt-too-long" not in check(ws).rules()


def test_exact_prompt_length_with_a_local_tokenizer(tmp_path):
    """A character-level tokenizer built locally: exact counts replace the chars/3.5 estimate."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {ch: i for i, ch in enumerate(["[UNK]", *"0123456789abcdefghijklmnopqrstuvwxyz .,"])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    tok_dir = tmp_path / "tok"
    fast.save_pretrained(tok_dir)
    ws = make_workspace(tmp_path)
    train = ws / "data" / "train.jsonl"
    rows = [json.loads(x) for x in train.read_text().splitlines()]
    rows[2]["messages"][1]["content"] = "1" * 100  # 100 chars: ~29 estimated tokens, exactly 100+ tokens
    write_rows(train, rows)
    (ws / "config.yaml").write_text(
        config_text(extra_hp="max_prompt_length: 60\nmax_length: 256\n"), encoding="utf-8"
    )
    assert "data.prompt-too-long" not in check(ws).rules()  # the estimate misses it
    hit = check(ws, tokenizer_path=str(tok_dir)).by_rule("data.prompt-too-long")[0]
    assert hit.where == "data/train.jsonl:3" and "exactly" in hit.message


def test_fewer_training_rows_than_batch_size(tmp_path):
    ws = make_workspace(tmp_path, n_train=10)
    hit = check(ws).by_rule("data.too-few-rows")[0]
    assert hit.severity == "error" and "10 sample(s), fewer than batch_size 16" in hit.message
    assert "data.too-few-rows" not in check(make_workspace(tmp_path / "b", n_train=17)).rules()


def test_rows_equal_to_batch_size_fail_the_platform_gate(tmp_path):
    """Bailian refuses a training file whose sample count is not greater than batch_size (issue 26)."""
    hit = check(make_workspace(tmp_path, n_train=16)).by_rule("data.too-few-rows")[0]
    assert hit.severity == "error" and hit.where == "config.yaml:17"
    assert "16 sample(s), not more than batch_size 16" in hit.message
    assert hit.fix == "add rows (more than 16) or set batch_size <= 15"


def test_too_few_rows_is_one_message_not_a_step_count(tmp_path):
    """10 rows, batch 16: one error, and no eval-steps warning that counts steps that cannot run."""
    rules = check(make_workspace(tmp_path, n_train=10)).rules()
    assert "data.too-few-rows" in rules and "config.eval-steps-too-sparse" not in rules


def test_dataset_file_missing(tmp_path):
    ws = make_workspace(tmp_path)
    (ws / "data" / "train.jsonl").unlink()
    hit = check(ws).by_rule("data.file-missing")[0]
    assert hit.where == "config.yaml:8"


def test_file_over_upload_limit(tmp_path, monkeypatch):
    """The 1 GiB limit, lowered for the test (writing a real 1 GiB file is not worth the CI time)."""
    import opd_nb.checks.data as data_checks

    ws = make_workspace(tmp_path)
    size = (ws / "data" / "train.jsonl").stat().st_size
    monkeypatch.setattr(data_checks, "UPLOAD_LIMIT_BYTES", size - 1)
    hit = check(ws).by_rule("data.file-too-large")[0]
    assert hit.where == "data/train.jsonl" and "1 GiB upload limit" in hit.message
    monkeypatch.setattr(data_checks, "UPLOAD_LIMIT_BYTES", size)
    assert "data.file-too-large" not in check(ws).rules()


def test_reward_workspace_rows_have_solutions(tmp_path):
    ws = make_workspace(tmp_path, config=config_text(functions=REWARD_FUNCTIONS), reward=True)
    assert "data.missing-solution" not in check(ws).rules()


def test_trailing_comma_at_the_end_of_a_line_gives_its_real_column(tmp_path):
    """The newline is not part of the row: the column is the comma's, on the row's own line (issue 26)."""
    ws = make_workspace(tmp_path)
    train = ws / "data" / "train.jsonl"
    lines = train.read_text().splitlines()
    lines[3] = lines[3][:-1] + ","  # '{"messages": [...], "rollout_extra": {...},' : the row goes on below
    lines[5] = lines[5] + ","  # '{...},' : a comma after the row
    train.write_text("\n".join(lines) + "\n")
    hits = check(ws).by_rule("data.bad-json")
    assert [h.where for h in hits] == ["data/train.jsonl:4"]
    assert f"trailing comma at the end of the line (column {len(lines[3])})" in hits[0].message
    assert "column 1;" not in hits[0].message and "column 1)" not in hits[0].message
    assert "2 row(s), lines 4, 6" in hits[0].message
