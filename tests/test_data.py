"""opd_nb.data.jsonl: loading with line numbers, building rows, the split, stats."""

from __future__ import annotations

import json

import pytest

from opd_nb.data import jsonl as data
from opd_nb.engine.task import make_rows
from opd_nb.errors import OpdError


def test_read_jsonl_reports_line_and_parser_message(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "1"}]}\n\n{"messages": [}\n')
    with pytest.raises(OpdError) as err:
        data.read_jsonl(path)
    assert err.value.where == f"{path}:3" and "column" in err.value.message


def test_load_jsonl_validates(tmp_path):
    rows = make_rows(5)
    path = data.write_jsonl(rows, tmp_path / "ok.jsonl")
    assert data.load_jsonl(path, require_solution=True) == rows
    rows[3]["messages"][1]["role"] = "bot"
    data.write_jsonl(rows, path)
    with pytest.raises(OpdError) as err:
        data.load_jsonl(path)
    assert err.value.where == f"{path}:4" and "'bot'" in err.value.message


@pytest.mark.slow
def test_rows_from_dicts_dataframe_and_dataset():
    records = [{"question": "321", "answer": "123", "id": 7}, {"question": "90", "answer": "09", "id": 8}]
    rows = data.to_rows(
        records, prompt="question", solution="answer", system_prompt="Sort the digits.", extra=["id"]
    )
    assert rows[0] == {
        "messages": [{"role": "system", "content": "Sort the digits."}, {"role": "user", "content": "321"}],
        "rollout_extra": {"solution": "123", "id": 7},
    }
    pd = pytest.importorskip("pandas")
    assert (
        data.to_rows(
            pd.DataFrame(records),
            prompt="question",
            solution="answer",
            system_prompt="Sort the digits.",
            extra=["id"],
        )
        == rows
    )
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(records)
    assert (
        data.to_rows(ds, prompt="question", solution="answer", system_prompt="Sort the digits.", extra=["id"])
        == rows
    )
    with pytest.raises(OpdError, match="column"):
        data.to_rows(records, prompt="prompt")


def test_rows_without_a_prompt_or_messages_column_is_a_clear_error():
    with pytest.raises(OpdError, match="prompt=None and no messages column") as err:
        data.to_rows([{"question": "hi"}], prompt=None, solution=None)
    assert "prompt='question'" in (err.value.fix or "")


def test_rows_from_a_messages_column():
    records = [{"chat": [{"role": "user", "content": "hi"}], "solution": "x"}]
    assert data.to_rows(records, messages="chat") == [
        {"messages": [{"role": "user", "content": "hi"}], "rollout_extra": {"solution": "x"}}
    ]


def test_split_is_deterministic_and_never_overlaps():
    rows = make_rows(200, seed=3)
    rows += rows[:10]  # duplicates must stay on one side
    a, b = data.split(rows, 0.1, seed=5), data.split(rows, 0.1, seed=5)
    assert a.train == b.train and a.validation == b.validation
    assert len(a.validation) >= 20 and len(a.train) + len(a.validation) == len(rows)
    keys_t = {data.prompt_key(r) for r in a.train}
    assert not keys_t & {data.prompt_key(r) for r in a.validation}
    assert data.split(rows, 0.1, seed=6).validation != a.validation
    assert len(data.split(rows, 7).validation) >= 7
    with pytest.raises(OpdError):
        data.split(rows, 1.5)


def test_stats_text_and_html(tmp_path):
    rows = make_rows(50)
    rows.append({"messages": [{"role": "user", "content": "12345678901234"}]})
    path = data.write_jsonl(rows, tmp_path / "d.jsonl")
    s = data.stats(path)
    assert s.rows == 51 and s.with_solution == 50
    assert s.role_patterns == {"system>user": 50, "user": 1}
    chars = [sum(len(m["content"]) for m in r["messages"]) for r in rows]
    assert s.prompt_chars["max"] == max(chars) and s.prompt_chars["min"] == min(chars)
    assert s.prompt_tokens["max"] == max(
        data.estimate_tokens(c, len(r["messages"])) for c, r in zip(chars, rows, strict=True)
    )
    assert "system>user" in str(s) and "<table>" in s._repr_html_() and json.loads(s.to_json())["rows"] == 51
    assert data.stats(rows).rows == 51


def test_stats_prompt_lengths_are_exact_per_row(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "a" * n}]} for n in (7, 35, 70)]
    s = data.stats(rows)
    assert s.prompt_chars["min"] == 7 and s.prompt_chars["max"] == 70 and s.prompt_chars["p50"] == 35
    assert s.prompt_tokens["max"] == 20 + 4  # 70 / 3.5 + one turn's framing


def test_validate_returns_a_check_report(tmp_path):
    path = data.write_jsonl(make_rows(3), tmp_path / "d.jsonl")
    assert data.validate(path).ok
    path.write_text(path.read_text() + "{oops\n")
    rep = data.validate(path)
    assert not rep.ok and rep.by_rule("data.bad-json")[0].where == f"{path}:4"
