"""`opd data convert|stats|split`: ShareGPT, Alpaca, OpenAI-chat and prompt/completion files into rows `opd check` accepts.

The sample files are written from the engine's own task rows (`make_rows`), so the converted data is
what the bundled tiny pair learns, plus planted records each format gets wrong in its own way.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_checks_config import config_text, make_workspace

from opd_nb.checks import check
from opd_nb.cli import invoke
from opd_nb.data.conversion import convert
from opd_nb.data.jsonl import read_jsonl, validate
from opd_nb.engine.task import make_rows
from opd_nb.errors import OpdError

TASK = make_rows(100, seed=7)
N = len(TASK)


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


def _parts(row: dict) -> tuple[str, str, str]:
    system = next(m["content"] for m in row["messages"] if m["role"] == "system")
    user = next(m["content"] for m in row["messages"] if m["role"] == "user")
    return system, user, row["rollout_extra"]["solution"]


def sharegpt_file(path: Path) -> Path:
    records = []
    for row in TASK:
        system, user, answer = _parts(row)
        turns = [{"from": "human", "value": user}, {"from": "gpt", "value": answer}]
        records.append({"system": system, "conversations": turns})
    records.insert(3, {"conversations": [{"from": "gpt", "value": "hello"}]})  # line 4: no user turn
    records.insert(5, {"conversations": [{"from": "narrator", "value": "x"}]})  # line 6: unknown role
    text = "".join(json.dumps(r) + "\n" for r in records) + "{not json\n"  # line N + 3: bad JSON
    path.write_text(text, encoding="utf-8")
    return path


def alpaca_file(path: Path) -> Path:
    records = []
    for row in TASK:
        system, user, answer = _parts(row)
        records.append({"instruction": system, "input": user, "output": answer})
    records.append({"instruction": "", "input": "", "output": "x"})  # record N + 1: nothing to ask
    path.write_text(json.dumps(records, indent=1), encoding="utf-8")  # Alpaca files are JSON arrays
    return path


def openai_file(path: Path) -> Path:
    records = []
    for row in TASK:
        system, user, answer = _parts(row)
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": [{"type": "text", "text": user}]},  # content parts
            {"role": "assistant", "content": answer},
        ]
        records.append({"messages": messages})
    records.append({"messages": []})  # line N + 1: empty conversation
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _workspace_with(tmp_path: Path, rows: list[dict]) -> Path:
    """A workspace (batch 16) whose data is the converted rows, split without overlap."""
    from opd_nb.data.jsonl import split, write_jsonl

    ws = make_workspace(tmp_path, config=config_text())
    parts = split(rows, 8, seed=0)
    write_jsonl(parts.train, ws / "data" / "train.jsonl")
    write_jsonl(parts.validation, ws / "data" / "validation.jsonl")
    return ws


@pytest.mark.parametrize(
    "fmt,make,dropped",
    [
        (
            "sharegpt",
            sharegpt_file,
            {"no user turn": [4], "unknown role 'narrator'": [6], "not valid JSON": [N + 3]},
        ),
        ("alpaca", alpaca_file, {"empty instruction and input": [2 + N * 5]}),  # a file line (indent=1)
        ("openai-chat", openai_file, {"no conversation list": [N + 1]}),
    ],
)
def test_round_trip_into_data_opd_check_accepts(tmp_path, fmt, make, dropped):
    src = make(tmp_path / f"in-{fmt}.jsonl")
    out = tmp_path / "out.jsonl"
    result = convert(src, out, source_format=fmt)
    assert result.ok and result.written == len(TASK) and result.with_solution == len(TASK), str(result)
    assert {reason: d.lines for reason, d in result.dropped.items()} == dropped
    assert result.read == len(TASK) + sum(len(v) for v in dropped.values())
    rows = read_jsonl(out)
    for got, want in zip(rows, TASK, strict=True):
        system, user, answer = _parts(want)
        if fmt == "alpaca":  # instruction and input are joined into the user turn
            assert got["messages"] == [{"role": "user", "content": f"{system}\n\n{user}"}]
        else:
            assert got["messages"] == want["messages"]
        assert got["rollout_extra"] == {"solution": answer}
    assert validate(out, require_solution=True).findings == []
    report = check(_workspace_with(tmp_path / "ws", rows))
    assert report.ok and report.findings == [], str(report)
    for reason, lines in dropped.items():
        assert f"dropped 1: {reason} (line {lines[0]})" in str(result)
        assert html.escape(reason) in result._repr_html_()


def test_prompt_completion_system_and_solution_field(tmp_path):
    src = tmp_path / "pc.jsonl"
    records = [
        {"prompt": "2+2?", "completion": "4", "meta": {"gold": "4"}},
        {"prompt": "  ", "completion": "x"},
    ]
    records.append({"prompt": "3+3?", "completion": "six", "meta": {}})
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = convert(
        src, tmp_path / "o.jsonl", source_format="prompt-completion", system="Answer with a number."
    )
    assert result.written == 2 and result.dropped["empty prompt"].lines == [2]
    first = read_jsonl(tmp_path / "o.jsonl")[0]
    assert first == {
        "messages": [
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": "2+2?"},
        ],
        "rollout_extra": {"solution": "4"},
    }
    by_field = convert(
        src, tmp_path / "f.jsonl", source_format="prompt-completion", solution_field="meta.gold"
    )
    assert by_field.written == 1 and by_field.dropped["no value in --solution-field meta.gold"].lines == [3]


def test_rows_without_an_answer_are_kept_for_pure_distillation(tmp_path):
    src = tmp_path / "q.jsonl"
    src.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    result = convert(src, tmp_path / "o.jsonl", source_format="openai-chat")
    assert (
        result.written == 1
        and result.with_solution == 0
        and "rollout_extra" not in read_jsonl(result.output)[0]
    )


def _opd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real CLI in an 80-column terminal."""
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "opd_nb", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_a_pretty_printed_array_reports_file_lines_and_rows_kept_without_a_solution(tmp_path):
    """A ShareGPT export as people save it (a pretty-printed JSON array, a byte-order mark): each dropped
    record, and each row kept without an answer, is named by the file line where the record starts."""
    records = [
        {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
        {"conversations": [{"from": "gpt", "value": "no question"}]},  # dropped: no user turn
        {"conversations": [{"from": "human", "value": "Say hi"}, {"from": "gpt", "value": "  "}]},  # empty
        {"conversations": [{"from": "human", "value": "A question only"}]},  # no answer at all
        {"conversations": [{"from": "human", "value": "3+3?"}, {"from": "gpt", "value": "6"}]},
    ]
    text = json.dumps(records, indent=2)
    starts = [i for i, line in enumerate(text.splitlines(), start=1) if line == "  {"]
    (tmp_path / "chats.json").write_text("\ufeff" + text, encoding="utf-8")
    proc = _opd("data", "convert", "chats.json", "all.jsonl", "--from", "sharegpt", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "4 of 5 record(s) written, 2 with rollout_extra.solution" in proc.stdout
    assert f"dropped 1: no user turn (line {starts[1]})" in proc.stdout
    assert (
        f"kept 2 without a solution (empty or missing answer; lines {starts[2]}, {starts[3]})" in proc.stdout
    )
    out = json.loads(
        _opd(
            "data", "convert", "chats.json", "all.jsonl", "--from", "sharegpt", "--json", cwd=tmp_path
        ).stdout
    )
    assert out["without_solution"] == {"count": 2, "lines": starts[2:4]}
    assert out["dropped"]["no user turn"]["lines"] == [starts[1]]
    (tmp_path / "broken.json").write_text(text.replace('"6"', '"6",'), encoding="utf-8")  # a trailing comma
    (tmp_path / "b.jsonl").write_text("yesterday's rows\n", encoding="utf-8")
    broken = _opd("data", "convert", "broken.json", "b.jsonl", "--from", "sharegpt", cwd=tmp_path)
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert f"broken.json:{len(text.splitlines()) - 3}:" in broken.stderr, (
        broken.stderr
    )  # the line of the comma's close


@pytest.mark.slow
def test_stats_table_shows_the_solutions_count(tmp_path):
    """`opd data stats` in a terminal: the table's title has the solutions count the README promises."""
    rows = [dict(r) for r in TASK[:5]] + [{"messages": TASK[5]["messages"]}]  # the last row has no solution
    (tmp_path / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    proc = _opd("data", "stats", "all.jsonl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "all.jsonl: 6 rows, 5 with rollout_extra.solution" in proc.stdout
    assert "prompt tokens" in proc.stdout and "┃" in proc.stdout  # the rich table, not the plain text


def test_bad_arguments_are_one_line_errors(tmp_path):
    src = openai_file(tmp_path / "in.jsonl")
    with pytest.raises(OpdError, match="unknown format 'csv'") as err:
        convert(src, tmp_path / "o.jsonl", source_format="csv")
    assert "sharegpt, alpaca, openai-chat, prompt-completion" in err.value.fix
    with pytest.raises(OpdError, match="overwrite the input"):
        convert(src, src, source_format="openai-chat")
    with pytest.raises(OpdError, match="does not exist"):
        convert(tmp_path / "nope.jsonl", tmp_path / "o.jsonl", source_format="alpaca")


def test_cli_convert_stats_split(tmp_path):
    src = sharegpt_file(tmp_path / "in.jsonl")
    out = tmp_path / "all.jsonl"
    result = invoke(["data", "convert", str(src), str(out), "--from", "sharegpt"])
    assert result.written == len(TASK) and result.to_payload()["dropped"]["no user turn"]["lines"] == [4]
    stats = invoke(["data", "stats", str(out)])
    assert stats.rows == len(TASK) and stats.with_solution == len(TASK) and stats.problems == 0
    parts = invoke(["data", "split", str(out), "--out", str(tmp_path / "split"), "--validation", "8"])
    assert (parts.train_rows, parts.validation_rows) == (len(TASK) - 8, 8)
    train = {json.dumps(r["messages"]) for r in read_jsonl(parts.train)}
    assert train.isdisjoint(json.dumps(r["messages"]) for r in read_jsonl(parts.validation))
    with pytest.raises(OpdError, match="--from"):
        invoke(["data", "convert", str(src), str(out)])
    with pytest.raises(OpdError, match="cannot read .*missing.jsonl: No such file or directory"):
        invoke(["data", "stats", str(tmp_path / "missing.jsonl")])


@pytest.mark.slow
def test_a_local_job_trains_on_converted_sharegpt(local_server, tmp_path):
    """The issue's done-when: converted ShareGPT rows pass `opd check --target local` and a local job trains on them."""
    from conftest import tiny_workspace

    from opd_nb.client import JobClient, resolve_target, submit

    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=16, val_rows=8)
    out = tmp_path / "converted.jsonl"
    result = convert(sharegpt_file(tmp_path / "in.jsonl"), out, source_format="sharegpt")
    rows = read_jsonl(out)
    (ws / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:16]))
    (ws / "data" / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[16:24]))
    report = check(ws, "local", base_url=local_server.api_base)
    assert result.ok and report.ok, str(report)
    client = JobClient(resolve_target("local", base_url=local_server.base_url))
    job = client.wait(submit(ws, client.target).job_id, poll_s=0.5, timeout_s=300)
    assert job.status == "SUCCEEDED", client.logs(job.job_id, lines=10000).lines[-20:]
    assert any(r.get("step", 0) > 0 for r in client.metrics(job.job_id))
