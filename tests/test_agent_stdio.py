"""`opd mcp` as an agent meets it: started over stdio (and streamable HTTP) and driven with the `mcp`
SDK's own client. A scripted agent run on the session's `opd serve`, and the consent of a paid submit
against Bailian's counting stand-in: no token, a stale token and a token for a changed config send
nothing; the right token sends exactly one job, however often the confirmed call is repeated."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from bailian_standin import CountingProxy
from conftest import stop_jobs, tiny_workspace

from opd_nb.client import JobClient, resolve_target

pytestmark = pytest.mark.slow  # each test starts `opd mcp` processes of its own
KEY = "sk-agent-sentinel-7f3a9c0e5d1b"  # must never appear in a tool result or the server's log


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    env.update(DASHSCOPE_API_KEY=KEY, NO_PROXY="127.0.0.1,localhost", **extra)
    return env


@asynccontextmanager
async def agent(*args: str, errlog: Any, cwd: Path) -> Any:
    """`python -m opd_nb mcp ARGS` over stdio, as `opd mcp config` writes it for an agent."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "opd_nb", "mcp", *args], env=server_env(), cwd=str(cwd)
    )
    async with Client(stdio_client(params, errlog=errlog)) as client:
        yield client


class Calls:
    """Every tool call and what it answered (to check the key never appears in any)."""

    def __init__(self, client: Any):
        self.client, self.texts = client, []

    async def __call__(self, tool: str, **args: Any) -> dict:
        result = await self.client.call_tool(tool, args)
        self.texts += [c.text for c in result.content if hasattr(c, "text")]
        assert not result.is_error, f"{tool}: {result.content[0].text}"
        self.texts.append(json.dumps(result.structured_content))
        return result.structured_content

    async def error(self, tool: str, **args: Any) -> str:
        result = await self.client.call_tool(tool, args)
        assert result.is_error, f"{tool} should have failed: {result.structured_content}"
        self.texts.append(result.content[0].text)
        return result.content[0].text


def shrink(ws: Path, **hp: Any) -> None:
    """The template's reward job, small enough to train in seconds here (as conftest.tiny_workspace)."""
    from conftest import TINY_HP

    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    cfg["training"]["hyper_parameters"].update({**TINY_HP, "eval_steps": 1, **hp})
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    for name, n in (("train.jsonl", 16), ("validation.jsonl", 8)):
        data = ws / "data" / name
        data.write_text("".join(data.read_text().splitlines(keepends=True)[:n]))


def test_a_scripted_agent_creates_checks_submits_watches_reads_exports_deploys_and_evaluates(
    local_server, tmp_path
):
    log = (tmp_path / "server.log").open("w+")
    ws = tmp_path / "ws"

    async def run() -> Calls:
        async with agent("--local", local_server.api_base, errlog=log, cwd=tmp_path) as client:
            call = Calls(client)
            made = await call("new_workspace", mode="reward", dest=str(ws))
            assert made["mode"] == "reward" and "functions/reward/reward.py" in made["files"]
            shrink(ws)
            checked = await call("check", workspace=str(ws), target="local")
            assert checked["ok"] and checked["errors"] == 0
            assert (await call("estimate", workspace=str(ws)))["steps"] == 2
            submitted = await call("submit", workspace=str(ws))
            assert submitted["status"] == "started" and submitted["confirmation"] is None  # local: free
            job_id = submitted["result"]["job"]["job_id"]
            for _ in range(20):
                waited = await call("wait_job", job_id=job_id, timeout_s=60, guard=True)
                if waited["reason"] == "terminal":
                    break
            assert waited["job"]["status"] == "SUCCEEDED", waited
            metrics = await call("metrics", job_id=job_id, names=["actor/distillation/loss"], last=2)
            rows = JobClient(resolve_target("local", base_url=local_server.api_base)).metrics(job_id)
            losses = [r["actor/distillation/loss"] for r in rows if "actor/distillation/loss" in r]
            (loss,) = metrics["series"]
            assert loss["points"] == len(losses) and loss["last"] == losses[-1] and loss["min"] == min(losses)
            alerts = await call("alerts", job_id=job_id)
            best = alerts["best_checkpoint"]
            assert best and "validation/data/reward/mean@1" in best["reason"]
            samples = await call("samples", job_id=job_id)
            assert samples["samples"] > 0 and samples["best"]["reward"] >= samples["worst"]["reward"]
            assert samples["best"]["scored_tokens"] > 0 and samples["best"]["most_disagreeing"]
            table = await call("checkpoints", job_id=job_id)
            step = max(c["step"] for c in table["checkpoints"] if c["checkpoint"].startswith("checkpoint-"))
            exported = await call("export_checkpoint", job_id=job_id, checkpoint=f"checkpoint-{step}")
            deployed = await call("deploy", model=exported["model_name"])
            name = deployed["result"]["deployed_model"]
            assert deployed["status"] == "started" and deployed["result"]["status"] == "RUNNING"
            scored = await call("evaluate", workspace=str(ws), models=[name], rows=2)
            assert scored["result"]["models"][0]["n"] == 2 and len(scored["result"]["rows"]) == 2
            assert (await call("undeploy", name=name))["status"] == "DELETED"
            wrong = await call.error("job_status", job_id="ft-000000000000-000000")
            assert "ft-000000000000-000000" in wrong and "Traceback" not in wrong
            resource = await client.read_resource(f"opd://jobs/{job_id}/metrics")
            assert json.loads(resource.contents[0].text) == rows
            return call

    call = anyio.run(run)
    log.seek(0)
    server_log = log.read()
    assert all(KEY not in text for text in call.texts) and KEY not in server_log
    assert "Traceback" not in server_log


@pytest.fixture()
def bailian(local_server, monkeypatch) -> Iterator[CountingProxy]:
    proxy = CountingProxy(local_server.base_url)
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)  # the user's cloud: the only place the key goes
    try:
        yield proxy
    finally:
        proxy.close()


def test_a_cloud_submit_sends_nothing_without_the_right_token_and_one_job_with_it(
    bailian, local_server, tmp_path
):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=24)
    log = (tmp_path / "server.log").open("w+")
    cloud = {"workspace": str(ws), "target": "cloud", "base_url": bailian.api_base}

    async def stale_token() -> str:  # issued by an `opd mcp` that has since stopped (the agent restarted)
        async with agent(errlog=log, cwd=tmp_path) as client:
            return (await Calls(client)("submit", **cloud))["confirmation"]["confirmation_token"]

    async def run(old: str) -> tuple[list[str], str]:
        async with agent(errlog=log, cwd=tmp_path) as client:
            call = Calls(client)
            asked = await call("submit", **cloud)
            confirmation = asked["confirmation"]
            assert asked["status"] == "needs_confirmation" and asked["result"] is None
            assert (
                "needs your confirmation" in confirmation["summary"] and "24 rows" in confirmation["summary"]
            )
            assert (
                "--yes" not in confirmation["summary"] + confirmation["fix"]
            )  # the agent's words, not the CLI's
            assert confirmation["estimate"]["steps"] == 3 and confirmation["request"]["hyper_parameters"]
            assert bailian.requests == [], "the first call must send nothing"
            assert "unknown or expired" in await call.error("submit", **cloud, confirmation_token=old)
            token = confirmation["confirmation_token"]
            cfg = ws / "config.yaml"
            kept = cfg.read_text()
            cfg.write_text(kept.replace("n_epochs: 1", "n_epochs: 2"))
            assert "another submit request" in await call.error("submit", **cloud, confirmation_token=token)
            cfg.write_text(kept)
            assert bailian.requests == [], "a stale token or a changed config must send nothing"
            async with anyio.create_task_group() as tg:  # the confirmed call, three times at once
                answers: list[dict] = []

                async def confirm() -> None:
                    answers.append(await call("submit", **cloud, confirmation_token=token))

                for _ in range(3):
                    tg.start_soon(confirm)
            again = await call("submit", **cloud, confirmation_token=token)
            jobs = {a["result"]["job"]["job_id"] for a in [*answers, again]}
            assert sorted(a["status"] for a in answers) == ["already_started", "already_started", "started"]
            assert again["status"] == "already_started" and len(jobs) == 1
            return call.texts, jobs.pop()

    texts, job_id = anyio.run(run, anyio.run(stale_token))
    try:
        assert bailian.job_creations() == 1
    finally:
        stop_jobs(JobClient(resolve_target("local", base_url=local_server.api_base)), [job_id])
    log.seek(0)
    assert all(KEY not in t for t in texts) and KEY not in log.read()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_serves_on_loopback_and_needs_a_strong_key_elsewhere(tmp_path):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    refused = subprocess.run([sys.executable, "-m", "opd_nb", "mcp", "--http", "--host", "0.0.0.0"],
                             env=server_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (
        refused.returncode == 2
        and "OPD_SERVE_API_KEY" in refused.stderr
        and "Traceback" not in refused.stderr
    )
    port, server_key = _free_port(), "mcp-" + "k3y" * 12
    proc = subprocess.Popen([sys.executable, "-m", "opd_nb", "mcp", "--http", "--port", str(port)],
                            env=server_env(OPD_SERVE_API_KEY=server_key), stderr=subprocess.PIPE, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status = httpx2.post(url, json={}).status_code
                break
            except httpx2.TransportError:
                assert time.monotonic() < deadline, "opd mcp --http did not start"
                time.sleep(0.3)
        assert status == 401  # a server key set: every request carries it

        async def listed() -> list[str]:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {server_key}"})
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return [t.name for t in (await client.list_tools()).tools]

        assert "submit" in anyio.run(listed)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bad_input_over_stdio_is_one_line_each_and_the_server_writes_none_of_it(local_server, tmp_path):
    """The issue's inputs against a real `opd mcp --local` process: a NUL in a path, a 1 MB path, a
    100,000-character job id, a wrong type, a job the plane does not have (a tool and a resource). Each
    answer is one line with its fix; the server's stderr holds none of the input (it held a traceback per
    call with the argument: 2.2 MB for the megabyte path)."""
    from mcp.shared.exceptions import MCPError

    marker = "opd-stdio-sentinel-91c2"
    log = (tmp_path / "server.log").open("w+")
    calls = [
        ("check", {"workspace": f"{marker}\x00/ws"}),
        ("check", {"workspace": marker + "x" * 1_048_576}),
        ("job_status", {"job_id": marker + "j" * 100_000}),
        ("logs", {"job_id": marker, "tail": marker}),
        ("job_status", {"job_id": f"ft-000000000000-{marker[:6]}"}),
    ]

    async def run() -> tuple[list[str], str]:
        async with agent("--local", local_server.api_base, errlog=log, cwd=tmp_path) as client:
            said = []
            for tool, args in calls:
                result = await client.call_tool(tool, args)
                assert result.is_error, tool
                said.append(result.content[0].text)
            with pytest.raises(MCPError) as missing:
                await client.read_resource(f"opd://jobs/ft-000000000000-{marker[:6]}")
            return said, str(missing.value)

    said, missing = anyio.run(run)
    for line in [*said, missing]:
        assert "\n" not in line and len(line) < 700 and "fix" in line, line[:300]
        assert "Error executing tool" not in line and "Error creating resource" not in line, line
        assert "x" * 100 not in line and "j" * 100 not in line and "pydantic" not in line, line
    assert "NUL" in said[0] and "at most 4096" in said[1] and "at most 256" in said[2] and "tail" in said[3]
    assert "ft-000000000000" in said[4] and "ft-000000000000" in missing
    log.seek(0)
    written = log.read()
    assert marker not in written and len(written) < 2000, written[:500]
