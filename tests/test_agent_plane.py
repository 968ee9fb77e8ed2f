"""The plane tools through the `mcp` SDK's own client: the local plane started, reused, read and stopped
by an agent; a deployment the agent never got an answer for, found by `list_deployments`; a finished
job's every metric point from `metric_series`, the same as `opd metrics --json` (one core call)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from opd_nb.client import JobClient, resolve_target

pytestmark = pytest.mark.slow  # starts a control plane / reads a trained job


def run(calls: Any) -> Any:
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> Any:
        async with Client(build()) as client:
            return await calls(client)

    return anyio.run(go)


async def call(client: Any, tool: str, **args: Any) -> dict:
    result = await client.call_tool(tool, args)
    assert not result.is_error, f"{tool}: {result.content[0].text}"
    return result.structured_content


def test_an_agent_starts_reuses_and_stops_the_local_plane_and_finds_a_deployment_it_never_heard_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the background server's record: ours
    data = str(tmp_path / "data")

    async def first(client: Any) -> tuple[dict, dict, dict]:
        before = await call(client, "serve_status")
        started = await call(client, "serve_start", port=0, data_dir=data)
        again = await call(client, "serve_start", port=0, data_dir=data)
        return before, started, again

    before, started, again = run(first)
    try:
        assert not before["running"] and "opd serve start" in before["note"]
        assert (
            started["running"]
            and started["data_dir"] == data
            and started["base_url"].startswith("http://127.")
        )
        assert again["pid"] == started["pid"] and again["note"] == "already running"
        # a deploy whose answer the agent never got: sent by someone else, straight to the plane
        plane = JobClient(resolve_target("local", base_url=started["api_base"]))
        lost = plane.deploy("qwen3-8b", suffix="lost-answer").deployed_model

        async def listing(client: Any) -> dict:
            return await call(client, "list_deployments", target="local", base_url=started["api_base"])

        listed = run(listing)
        assert lost in [d["deployed_model"] for d in listed["deployments"]] and listed["total"] >= 1
        plane.undeploy(lost)
    finally:

        async def last(client: Any) -> tuple[dict, dict]:
            return await call(client, "serve_stop"), await call(client, "serve_status")

        stopped, after = run(last)
    assert not stopped["running"] and started["base_url"] in stopped["note"]
    assert not after["running"]


def test_metric_series_is_every_point_and_the_same_as_opd_metrics(finished_job, local_server, capsys) -> None:  # noqa: ANN001
    from opd_nb.cli import main
    from opd_nb.plots.series import series_points

    job = finished_job("reward")
    base = local_server.api_base
    rows = JobClient(resolve_target("local", base_url=base)).metrics(job.job_id) or []
    made_up = [f"made/up/{i}" for i in range(10_000)]

    async def calls(client: Any) -> tuple[dict, dict, Any]:
        every = await call(client, "metric_series", job_id=job.job_id, target="local", base_url=base)
        known = every["series"][0]["name"]
        asked = await call(client, "metric_series", job_id=job.job_id, names=[known, *made_up],
                           target="local", base_url=base)  # fmt: skip
        raw = await client.call_tool("metric_series", {"job_id": job.job_id, "names": made_up,
                                                       "target": "local", "base_url": base})  # fmt: skip
        summary = await client.call_tool("metrics", {"job_id": job.job_id, "names": made_up,
                                                     "target": "local", "base_url": base})  # fmt: skip
        return every, asked, raw, summary

    every, asked, raw, summary = run(calls)
    said = summary.content[0].text  # the summary tool (138 KB echoing the names before): counted, capped
    assert not summary.is_error and "10,000 name(s) not in this job's metrics" in said and len(said) < 3000
    assert every["series"] and every["unknown"] == 0
    for one in every["series"]:  # every point, by the one reading of metric rows
        assert (one["steps"], one["values"]) == tuple(map(list, series_points(rows, one["name"])))
    known = every["series"][0]
    assert asked["series"] == [known] and asked["unknown"] == 10_000
    assert "9,995 more" in asked["note"] and len(raw.content[0].text) < 1000
    with pytest.raises(SystemExit) as done:
        main(["metrics", job.job_id, "--local", base, "--json"])
    assert done.value.code == 0
    assert json.loads(capsys.readouterr().out) == every  # one core call, one shape
    with pytest.raises(SystemExit) as done:
        main(["metrics", job.job_id, "--local", base, "--name", known["name"]])
    table = capsys.readouterr().out.splitlines()
    assert table[0] == f"step\t{known['name']}" and len(table) == 1 + len(known["steps"])
