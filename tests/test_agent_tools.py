"""The agent's tools as a host meets them, in process through the `mcp` SDK's own client: each tool's
behaviour hints, one-line errors for the whole family of bad input (a NUL, a megabyte, a wrong type, in
every string argument of every tool; a bad job id in every resource template) with nothing of the input in
a log, compact result text, capped echoes, the one default target, and the plane tools."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from opd_nb.agent.failures import MAX_ERROR_CHARS
from opd_nb.agent.planes import MAX_ID_CHARS, MAX_PATH_CHARS

FREE_TEXT = {"message", "system"}  # a chat message may be long: no cap but the plane's, no NUL
SENTINEL = "opd-sentinel-7f3a"  # part of every bad value sent: it must reach no log line


def run(calls: Any) -> Any:
    """`calls(client)` against a fresh server, through the SDK's in-memory client."""
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> Any:
        async with Client(build()) as client:
            return await calls(client)

    return anyio.run(go)


@pytest.fixture(scope="module")
def tools() -> list:
    async def listing(client: Any) -> list:
        return (await client.list_tools()).tools

    return run(listing)


@pytest.fixture()
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record at any level, the SDK's INFO lines included."""
    with caplog.at_level(logging.DEBUG):
        yield caplog


def _string_props(schema: dict) -> dict[str, dict]:
    """name -> the string schema of each argument that is a string, an optional string or a list of them."""
    out = {}
    for name, prop in schema.get("properties", {}).items():
        for arm in prop.get("anyOf", [prop]):
            item = arm.get("items", {}) if arm.get("type") == "array" else arm
            if item.get("type") == "string" and "enum" not in item and "const" not in item:
                out[name] = {**item, "array": arm.get("type") == "array"}
    return out


def _send(prop: dict, value: str) -> Any:
    return [value] if prop["array"] else value


# ---------------------------------------------------------------- annotations
def test_every_tool_carries_all_four_hints_and_they_agree_with_what_it_does(tools):
    for tool in tools:
        hints = tool.annotations
        assert hints is not None, tool.name
        values = (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint, hints.open_world_hint)
        assert None not in values, tool.name
        props = tool.input_schema.get("properties", {})
        if hints.read_only_hint:
            assert not hints.destructive_hint and hints.idempotent_hint, tool.name
        if "confirmation_token" in props:  # a paid start: each confirmed start is a new bill, on Bailian
            assert not hints.read_only_hint and not hints.idempotent_hint and hints.open_world_hint, tool.name
        if "target" in props:  # may reach Bailian
            assert hints.open_world_hint, tool.name
    by_name = {t.name: t.annotations for t in tools}
    for stopper in ("cancel_job", "undeploy", "serve_stop"):
        assert by_name[stopper].destructive_hint and not by_name[stopper].read_only_hint, stopper
    for reader in ("list_jobs", "job_status", "metrics", "metric_series", "alerts", "logs", "samples",
                   "checkpoints", "compare", "list_deployments", "serve_status", "check", "estimate"):  # fmt: skip
        assert by_name[reader].read_only_hint, reader
    assert not by_name["chat"].read_only_hint and not by_name["chat"].idempotent_hint  # billed per call


def test_a_tool_without_declared_hints_stops_the_server_from_building():
    from opd_nb.agent.annotations import annotations_for

    with pytest.raises(LookupError, match="no entry"):
        annotations_for("made_up_tool")


# ---------------------------------------------------------------- bad input, the whole family
def test_every_string_argument_has_a_length_cap_but_free_text(tools):
    for tool in tools:
        for name, prop in _string_props(tool.input_schema).items():
            if name in FREE_TEXT:
                continue
            assert prop.get("maxLength") in (MAX_ID_CHARS, MAX_PATH_CHARS), f"{tool.name}.{name}: {prop}"


def _assert_one_line(text: str, tool: str, arg: str) -> None:
    assert "\n" not in text and len(text) <= MAX_ERROR_CHARS, text[:300]
    assert text.startswith(f"{tool}: ") and arg in text and "fix:" in text, text
    assert SENTINEL not in text and "pydantic" not in text and "Error executing tool" not in text, text


def _no_input_logged(logged: pytest.LogCaptureFixture) -> None:
    for record in logged.records:
        assert SENTINEL not in record.getMessage() and record.exc_info is None, record.getMessage()[:300]


@pytest.mark.parametrize("bad", ["nul", "megabyte"])
def test_a_nul_or_a_megabyte_in_any_string_argument_is_one_line_and_logs_nothing_of_it(tools, logged, bad):
    """The family of the issue's three inputs (a NUL in a path, a 1 MB path, a 100,000-character job id):
    every string argument of every tool."""
    cases = []
    for tool in tools:
        for name, prop in _string_props(tool.input_schema).items():
            if bad == "megabyte" and name in FREE_TEXT:
                continue
            value = f"{SENTINEL}\x00x" if bad == "nul" else SENTINEL + "x" * 1_048_576
            cases.append((tool.name, name, {name: _send(prop, value)}))
    assert len(cases) > 40

    async def calls(client: Any) -> list:
        return [(t, a, await client.call_tool(t, args)) for t, a, args in cases]

    for tool, arg, result in run(calls):
        assert result.is_error, f"{tool}.{arg}"
        text = result.content[0].text
        _assert_one_line(text, tool, arg)
        assert ("NUL" if bad == "nul" else "at most") in text, text
    _no_input_logged(logged)


def test_a_wrong_type_in_any_argument_is_one_line_without_a_pydantic_dump(tools, logged):
    cases = [(t.name, name) for t in tools for name in t.input_schema.get("properties", {})]

    async def calls(client: Any) -> list:
        return [(t, a, await client.call_tool(t, {a: [[SENTINEL]]})) for t, a in cases]

    for tool, arg, result in run(calls):
        assert result.is_error, f"{tool}.{arg}"
        _assert_one_line(result.content[0].text, tool, arg)
    _no_input_logged(logged)


def test_a_crash_inside_a_tool_is_one_line_and_its_log_line_holds_no_message(logged):
    from mcp import Client

    from opd_nb.agent.server import build

    def boom(path: str) -> str:
        raise ValueError(f"cannot open {path}")

    async def go() -> Any:
        app = build()
        app.add_tool(boom)
        async with Client(app) as client:
            return await client.call_tool("boom", {"path": SENTINEL})

    result = anyio.run(go)
    records = logged.records
    text = result.content[0].text
    assert result.is_error and text.startswith("boom: failed inside opd-nb (ValueError)") and "fix:" in text
    assert SENTINEL not in text
    assert all(SENTINEL not in r.getMessage() and r.exc_info is None for r in records)
    assert any("ValueError" in r.getMessage() for r in records)  # the type and place are kept


TEMPLATES = ("opd://jobs/{}", "opd://jobs/{}/metrics", "opd://jobs/{}/log")


@pytest.mark.slow
def test_a_bad_job_id_in_any_resource_template_is_one_line(logged, monkeypatch):
    """Too long, in every template (refused before any request), and one no plane answers for (the
    plane's line, not the SDK's "Error creating resource from template"); the job id reaches no log."""
    from mcp.shared.exceptions import MCPError

    monkeypatch.setenv("DASHSCOPE_HTTP_BASE_URL", "http://127.0.0.1:9/api/v1")  # a local plane that is down
    reads = [template.format("j" * 300 + SENTINEL) for template in TEMPLATES]
    reads.append(TEMPLATES[1].format(f"ft-{SENTINEL}"))

    async def read(client: Any) -> list[str]:
        said = []
        for uri in reads:
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            said.append(str(refused.value))
        return said

    *too_long, unreachable = run(read)
    for line in too_long:
        assert "not a job id (3" in line and "fix:" in line and SENTINEL not in line, line
    assert "cannot reach the local control plane" in unreachable and "template" not in unreachable
    assert "\n" not in unreachable and "fix:" in unreachable and len(unreachable) <= MAX_ERROR_CHARS
    _no_input_logged(logged)


# ---------------------------------------------------------------- results: compact, capped
def test_ten_thousand_unknown_metric_names_come_back_counted_not_echoed():
    from opd_nb.agent.views import metrics_view
    from opd_nb.plots.job_series import JobSeries

    rows = [{"step": s, "train/loss": 1.0 / s, "train/reward": 0.1 * s} for s in range(1, 21)]
    names = [f"made/up/{i}" for i in range(10_000)]
    summary = metrics_view("ft-1", rows, [*names, "train/loss"], last=5)
    assert [s.name for s in summary.series] == ["train/loss"]
    assert (
        summary.note.startswith("10,000 name(s) not in this job's metrics") and "9,995 more" in summary.note
    )
    assert len(summary.model_dump_json()) < 3000
    assert all(set(r) <= {"step", "train/loss"} for r in summary.last_rows)
    full = JobSeries(job_id="ft-1", available=True, unknown=10_000, note=summary.note)
    assert len(full.model_dump_json()) < 600


def test_a_result_text_is_its_structured_content_once_compact(tmp_path):
    from conftest import tiny_workspace

    ws = str(tiny_workspace("reward", tmp_path / "ws"))

    async def calls(client: Any) -> list:
        return [
            await client.call_tool("estimate", {"workspace": ws}),
            await client.call_tool("serve_status", {}),
        ]

    for result in run(calls):
        assert not result.is_error and len(result.content) == 1
        text = result.content[0].text
        assert json.loads(text) == result.structured_content
        assert text == json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------- one default target
def test_check_defaults_to_the_plane_the_server_was_started_for(tmp_path, monkeypatch):
    """`opd mcp --local` points the process at the local plane (with the placeholder key): `check` then
    applies the local rules as every other tool's default does; naming cloud still gets the cloud's."""
    from conftest import tiny_workspace

    from opd_nb import settings
    from opd_nb.client.target import use_target

    for var in ("DASHSCOPE_API_KEY", "DASHSCOPE_HTTP_BASE_URL", settings.LOCAL_KEY_MARK.name):
        monkeypatch.setenv(var, "")  # restored after the test, whatever use_target sets
        monkeypatch.delenv(var)
    ws = str(tiny_workspace("reward", tmp_path / "ws"))
    use_target("local")  # what `opd mcp --local` does before serving

    async def calls(client: Any) -> list:
        return [(await client.call_tool("check", args)).structured_content
                for args in ({"workspace": ws}, {"workspace": ws, "target": "cloud"})]  # fmt: skip

    default, cloud = run(calls)
    rules = [{f["rule"] for f in answer["findings"]} for answer in (default, cloud)]
    assert "env.no-api-key" not in rules[0] and "env.no-api-key" in rules[1]


def test_an_unknown_tool_name_is_one_capped_line_with_the_fix(logged):
    async def calls(client: Any) -> list:
        return [await client.call_tool(name, {}) for name in ("submit_job", SENTINEL + "t" * 100_000)]

    short, huge = (r.content[0].text for r in run(calls))
    assert short == "no tool 'submit_job' (fix: call one that tools/list names)"
    assert huge.startswith("no tool ") and "fix:" in huge and len(huge) <= MAX_ERROR_CHARS
    _no_input_logged(logged)
