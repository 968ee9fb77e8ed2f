"""The agent front end without a control plane: the tool list and its schemas (the SDK's own client, in
process), the consent book's rules, the skill file against the real tools and flags, `opd mcp config`."""

from __future__ import annotations

import json
import re
import sys
import threading
import tomllib
from pathlib import Path

import anyio
import pytest

from opd_nb.agent.agent_config import AGENTS, agent_config
from opd_nb.agent.consent import CHANGED_REQUEST, STALE_TOKEN, ConsentBook
from opd_nb.cli import command, main
from opd_nb.errors import OpdError
from opd_nb.paid.gate import NEEDS_CONFIRMATION

REPO = Path(__file__).resolve().parent.parent
SKILL = REPO / "skills" / "opd-nb" / "SKILL.md"
VERBS = {"new_workspace", "check", "estimate", "smoke", "submit", "sweep", "list_jobs", "job_status", "wait_job",
         "metrics", "alerts", "logs", "samples", "checkpoints", "export_checkpoint", "deploy", "undeploy", "chat",
         "evaluate", "compare", "cancel_job", "report", "serve_start", "serve_stop", "serve_status",
         "list_deployments", "metric_series", "probe"}  # fmt: skip
PAID = {"submit", "smoke", "sweep", "deploy", "evaluate", "probe"}


def listing() -> tuple[list, list]:
    """(tools, resource URIs and templates) as the SDK's client sees them."""
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> tuple[list, list]:
        async with Client(build()) as client:
            tools = (await client.list_tools()).tools
            uris = [str(r.uri) for r in (await client.list_resources()).resources]
            uris += [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            return tools, uris

    return anyio.run(go)


def test_every_verb_is_a_tool_with_an_input_and_an_output_schema():
    tools, uris = listing()
    by_name = {t.name: t for t in tools}
    assert set(by_name) == VERBS
    for tool in tools:
        assert tool.input_schema["type"] == "object" and tool.output_schema, tool.name
        assert tool.description and len(tool.description) > 30, tool.name
        props = tool.input_schema.get("properties", {})
        assert ("confirmation_token" in props) == (tool.name in PAID), tool.name
        assert ("target" in props) == ("base_url" in props), tool.name  # a plane is named by both, as the CLI
    paid = by_name["submit"].output_schema
    assert {"status", "confirmation", "result"} <= set(paid["properties"])
    assert {"opd://jobs/{job_id}", "opd://jobs/{job_id}/metrics", "opd://jobs/{job_id}/log",
            "opd://rules/preflight", "opd://docs/metrics", "opd://docs/troubleshooting"} == set(uris)  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def refuse(yes: bool) -> str:
    """A core start as `spend.require_consent` answers it on Bailian."""
    if not yes:
        raise OpdError(
            "nothing sent: Bailian bills this, so it needs your confirmation: a job", code=NEEDS_CONFIRMATION
        )
    return "job-1"


def test_a_token_is_single_use_expires_and_is_bound_to_its_request():
    clock, started = Clock(), []
    book = ConsentBook(ttl_s=300, clock=clock)

    def start(yes: bool, request_id: str | None) -> str:
        started.append(yes)
        return refuse(yes) + f"#{len(started)}"

    first = book.run("submit", lambda: "fp-a", start, None)
    assert first.refusal is not None and first.result is None and started == [False]
    assert "needs your confirmation" in first.refusal.summary
    token = first.refusal.token
    with pytest.raises(OpdError) as other:  # the config changed since: another fingerprint
        book.run("submit", lambda: "fp-b", start, token)
    assert other.value.code == CHANGED_REQUEST and started == [False]
    with pytest.raises(OpdError) as made_up:
        book.run("submit", lambda: "fp-a", start, "opd-confirm-made-up")
    assert made_up.value.code == STALE_TOKEN
    done = book.run("submit", lambda: "fp-a", start, token)
    again = book.run("submit", lambda: "fp-a", start, token)
    assert done.result == again.result and again.repeated and started == [False, True]
    late = book.run("submit", lambda: "fp-a", start, None).refusal
    clock.now = 301
    with pytest.raises(OpdError) as expired:
        book.run("submit", lambda: "fp-a", start, late.token)
    assert expired.value.code == STALE_TOKEN and started.count(True) == 1


def test_concurrent_confirmed_calls_start_one_job():
    book, started, gate = ConsentBook(), [], threading.Event()

    def start(yes: bool, request_id: str | None) -> str:
        if yes:
            gate.wait(5)
            started.append(yes)
        return refuse(yes)

    token = book.run("submit", lambda: "fp", start, None).refusal.token
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(book.run("submit", lambda: "fp", start, token)))
               for _ in range(4)]  # fmt: skip
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert len(started) == 1 and {r.result for r in results} == {"job-1"}
    assert sum(not r.repeated for r in results) == 1


def test_a_local_start_needs_no_token():
    book = ConsentBook()
    outcome = book.run("submit", lambda: "fp", lambda yes, request_id: "local-job", None)
    assert outcome.result == "local-job" and outcome.refusal is None


# ---------------------------------------------------------------- the skill names what exists
def _schema_words(node: object, out: set[str]) -> None:
    if isinstance(node, dict):
        out.update(k for k in node.get("properties", {}) if isinstance(k, str))
        out.update(v for v in node.get("enum", []) if isinstance(v, str))
        if isinstance(node.get("const"), str):
            out.add(node["const"])
        for value in node.values():
            _schema_words(value, out)
    elif isinstance(node, list):
        for value in node:
            _schema_words(value, out)


def test_the_skill_names_only_tools_fields_resources_and_flags_that_exist():
    text = SKILL.read_text(encoding="utf-8")
    front = re.match(r"^---\nname: (?P<name>[a-z0-9-]+)\ndescription: (?P<desc>.+?)\n---\n", text, re.S)
    assert front and front["name"] == SKILL.parent.name and len(front["desc"]) > 80
    tools, uris = listing()
    names = {t.name for t in tools}
    words: set[str] = set()
    for tool in tools:
        _schema_words(tool.input_schema, words)
        _schema_words(tool.output_schema, words)
    from opd_nb.agent.knowledge import troubleshooting

    words |= {row["rule"] for row in troubleshooting()}  # the health rules `alerts` reports by id
    spans = re.findall(r"`([^`]+)`", text)
    identifiers = [s for s in spans if re.fullmatch(r"[a-z][a-z0-9_]*", s)]
    unknown = [s for s in identifiers if s not in names | words]
    assert not unknown, f"SKILL.md names what no tool has: {unknown}"
    assert VERBS <= set(identifiers), f"tools the skill never names: {VERBS - set(identifiers)}"
    flat = " ".join(text.split())
    said = re.search(r"Every tool but (.+?) \(which work on this machine only\) takes `target`", flat)
    assert said, "SKILL.md must say which tools take no target"
    planeless = {t.name for t in tools if "target" not in t.input_schema.get("properties", {})}
    assert set(re.findall(r"`([a-z_]+)`", said[1])) == planeless
    for uri in (s for s in spans if s.startswith("opd://")):
        assert uri in uris, uri
    group = command()
    lines = [s for s in spans if s.startswith("opd ")]
    assert len(lines) >= 8
    for line in lines:
        words_ = line.split()[1:]
        cmd = group.commands[words_[0]]
        rest = words_[1:]
        if rest and hasattr(cmd, "commands") and rest[0] in cmd.commands:
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        flags = {o for p in cmd.params for o in getattr(p, "opts", [])}
        for word in rest:
            if word.startswith("--"):
                assert word in flags, f"`{line}`: {word} is not a flag of opd {words_[0]}"


# ---------------------------------------------------------------- opd mcp config
@pytest.mark.slow
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_mcp_config_prints_what_each_agent_reads_and_write_keeps_the_rest(agent, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(
            ["mcp", "config", "--for", agent, "--project", str(tmp_path), "--local", "http://127.0.0.1:8799"]
        )
    assert done.value.code == 0
    shown = capsys.readouterr()
    parse = tomllib.loads if AGENTS[agent].endswith(".toml") else json.loads
    entry = parse(shown.out)["mcp_servers" if AGENTS[agent].endswith(".toml") else "mcpServers"]["opd-nb"]
    assert entry["args"][-2:] == ["--local", "http://127.0.0.1:8799"]  # stdout is exactly the file
    assert AGENTS[agent] in shown.err and not (tmp_path / AGENTS[agent]).exists()  # the hint: stderr
    path = tmp_path / AGENTS[agent]
    path.parent.mkdir(parents=True, exist_ok=True)
    other = (
        '[mcp_servers.other]\ncommand = "x"\n'
        if path.suffix == ".toml"
        else '{"mcpServers": {"other": {"command": "x"}}, "theme": "dark"}'
    )
    path.write_text(other)
    written = agent_config(agent, ["--local", "http://127.0.0.1:8799"], tmp_path, write=True)
    again = agent_config(agent, ["--cloud"], tmp_path, write=True)  # rewriting replaces only our entry
    assert written.written and again.written
    raw = path.read_text()
    data = tomllib.loads(raw)["mcp_servers"] if path.suffix == ".toml" else json.loads(raw)["mcpServers"]
    assert data["other"]["command"] == "x" and set(data) == {"other", "opd-nb"}
    entry = data["opd-nb"]
    assert entry["command"] == sys.executable and entry["args"] == ["-m", "opd_nb", "mcp", "--cloud"]
    if path.suffix != ".toml":
        assert json.loads(raw)["theme"] == "dark"
    assert "DASHSCOPE_API_KEY" not in raw


CODEX_AS_WRITTEN = {  # an opd-nb entry as people write it, with an env of its own and things around it
    "dotted keys": '# my codex config\nmodel = "o3"\nmcp_servers.opd-nb.command = "old"\n'
    'mcp_servers.opd-nb.args = ["x"]\nmcp_servers.opd-nb.env = { LOG_LEVEL = "debug" }\n',
    "an inline table": '[mcp_servers]\nopd-nb = { command = "old", args = [], env = { LOG_LEVEL = "debug" } }\n'
    'other = { command = "x" }  # keep me\n',
    "an env table": '[mcp_servers.other]\ncommand = "x"  # keep me\n\n[mcp_servers.opd-nb]\ncommand = "old"\n'
    'args = []\n\n[mcp_servers.opd-nb.env]\nLOG_LEVEL = "debug"\n',
    "dotted keys in the table": '[mcp_servers]\nopd-nb.command = "old"\nopd-nb.env.LOG_LEVEL = "debug"\n',
}


@pytest.mark.parametrize("layout", sorted(CODEX_AS_WRITTEN))
def test_codex_write_sets_our_command_and_keeps_everything_else_as_written(layout, tmp_path):
    path = tmp_path / AGENTS["codex"]
    path.parent.mkdir(parents=True)
    before = CODEX_AS_WRITTEN[layout]
    path.write_text(before)
    agent_config("codex", ["--local"], tmp_path, write=True)
    agent_config("codex", ["--cloud"], tmp_path, write=True)  # and again, over our own entry
    after = path.read_text()
    servers = tomllib.loads(after)["mcp_servers"]  # valid TOML, as Codex reads it
    ours = servers["opd-nb"]
    assert ours["command"] == sys.executable and ours["args"] == ["-m", "opd_nb", "mcp", "--cloud"]
    assert ours["env"] == {"LOG_LEVEL": "debug"}
    was = tomllib.loads(before)["mcp_servers"]
    assert {k: v for k, v in servers.items() if k != "opd-nb"} == {
        k: v for k, v in was.items() if k != "opd-nb"
    }
    for comment in (line for line in before.splitlines() if "#" in line):
        assert comment.split("#", 1)[1] in after


WRONG_SHAPES = {
    "cursor": ['{"mcpServers": []}'],
    "qwen-code": ['{"theme": "dark", "mcpServers": 3}'],
    "claude-code": ['{"mcpServers": []}', '{"mcpServers": "x"}', "[1, 2]", '{"mcpServers": {', '"text"'],
    "codex": ['mcp_servers = "x"', "mcp_servers = [1]", "[mcp_servers]\nopd-nb = 3\n", "not = toml = at all"],
}


@pytest.mark.parametrize(("agent", "text"), [(a, t) for a, texts in WRONG_SHAPES.items() for t in texts])
def test_write_over_a_file_of_another_shape_is_a_clear_error_and_leaves_it(agent, text, tmp_path, capsys):
    path = tmp_path / AGENTS[agent]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(SystemExit) as done:
        main(["mcp", "config", "--for", agent, "--project", str(tmp_path), "--write"])
    err = capsys.readouterr().err
    assert done.value.code != 0 and path.read_text() == text
    assert "Traceback" not in err and str(path) in err and "nothing was written" in err and "fix:" in err


def test_mcp_config_names_the_agents_it_knows(capsys):
    with pytest.raises(SystemExit) as done:
        main(["mcp", "config", "--for", "vim"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "unknown agent 'vim'" in err and "claude-code" in err and "Traceback" not in err


@pytest.mark.slow  # five previews, two of them run submit_job.py --dry-run (several seconds)
def test_every_paid_tool_first_answers_a_confirmation_and_sends_nothing(tmp_path, monkeypatch):
    """Submit, smoke, sweep, deploy and a cloud evaluation, on Bailian's counting stand-in (whose
    upstream answers nothing: a request that got through would show, and fail)."""
    from bailian_standin import CountingProxy
    from conftest import tiny_workspace
    from mcp import Client

    from opd_nb.agent.server import build

    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-standin-0000000000")
    ws = str(tiny_workspace("reward", tmp_path / "ws", train_rows=24))
    proxy = CountingProxy("http://127.0.0.1:9")
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)  # the user's cloud: the only place the key goes
    cloud = {"target": "cloud", "base_url": proxy.api_base}
    calls = {
        "submit": {"workspace": ws},
        "smoke": {"workspace": ws},
        "sweep": {"workspace": ws, "params": ["learning_rate=1e-6,2e-6"]},
        "deploy": {"model": "qwen3.5-9b"},
        "evaluate": {"workspace": ws, "models": ["qwen3.5-9b"], "rows": 3},
    }

    async def go() -> dict[str, dict]:
        async with Client(build()) as client:
            out = {}
            for tool, args in calls.items():
                result = await client.call_tool(tool, {**args, **cloud})
                assert not result.is_error, f"{tool}: {result.content[0].text}"
                out[tool] = result.structured_content
            return out

    try:
        answers = anyio.run(go)
    finally:
        proxy.close()
    assert proxy.requests == []
    for tool, answer in answers.items():
        confirmation = answer["confirmation"]
        assert answer["status"] == "needs_confirmation" and answer["result"] is None, tool
        assert confirmation["summary"].startswith("nothing sent: Bailian bills this"), tool
        assert (
            confirmation["confirmation_token"].startswith("opd-confirm-")
            and "confirmation_token" in confirmation["fix"]
        )
    assert "3 calls" in answers["evaluate"]["confirmation"]["summary"]
    assert "2 paid job(s)" in answers["sweep"]["confirmation"]["summary"]
    assert len(answers["sweep"]["confirmation"]["request"]["jobs"]) == 2
    assert answers["smoke"]["confirmation"]["estimate"]["smoke"] is True
    assert answers["submit"]["confirmation"]["estimate"]["steps"] == 3
    assert answers["submit"]["confirmation"]["request"]["training_type"]
