"""Paid starts happen once (issue 50): a billed POST is never resent on its own, a start whose answer was
lost is found by its request id instead of sent again (CLI and agent), a token is spent when its request
is sent and binds every file the request reads, and deploy and evaluate confirmations say what they cost.

The paid plane is Bailian's stand-in (:mod:`bailian_standin`): a loopback proxy that counts requests,
forwards them to the session's `opd serve` (or to nothing) and injects the network's faults: an answer
lost after the request was carried out, a busy 503.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
import yaml
from bailian_standin import CHAT, DEPLOY_CREATE, JOB_CREATE, CountingProxy
from conftest import stop_jobs, tiny_workspace
from pydantic import SecretStr

from opd_nb.agent.consent import SPENT_TOKEN, ConsentBook, request_fingerprint
from opd_nb.cli import main
from opd_nb.client import AsyncJobClient, JobClient, Target, resolve_target
from opd_nb.errors import OpdError
from opd_nb.paid.gate import NEEDS_CONFIRMATION

KEY = "sk-standin-0000000000000000"
NOWHERE = "http://127.0.0.1:9"  # an upstream that answers nothing: a request that got through would fail
DEPLOYMENTS = "/api/v1/deployments"


def cloud(proxy: CountingProxy, retries: int = 1) -> JobClient:
    return JobClient(Target(kind="cloud", base_url=proxy.api_base, api_key=SecretStr(KEY)), retries=retries)


@pytest.fixture()
def cloud_env(monkeypatch) -> None:
    monkeypatch.setenv("DASHSCOPE_API_KEY", KEY)
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


@pytest.fixture()
def busy() -> CountingProxy:
    """A host that answers every request 503 without carrying it out."""
    proxy = CountingProxy(NOWHERE)
    for method, path in (CHAT, DEPLOY_CREATE, ("GET", DEPLOYMENTS), ("GET", "/api/v1/fine-tunes/ft-1")):
        proxy.fault(method, path, 503, forward=False, times=100)
    yield proxy
    proxy.close()


# ---- one resend rule: a billed POST is sent once; an idempotent GET is retried -------------------------
@pytest.mark.slow
def test_a_billed_post_is_sent_once_on_503_and_an_idempotent_get_is_retried(busy):
    client = cloud(busy, retries=3)
    with pytest.raises(OpdError) as chat:
        client.chat("qwen3.5-9b", "hi")
    assert chat.value.status == 503 and busy.count(*CHAT) == 1  # 4 before the rule
    with pytest.raises(OpdError):
        anyio.run(lambda: AsyncJobClient(client.target, retries=3).chat("qwen3.5-9b", "hi"))
    assert busy.count(*CHAT) == 2  # the async client keeps the same rule
    with pytest.raises(OpdError) as job:
        cloud(busy, retries=2).get("ft-1")
    assert job.value.status == 503 and busy.count("GET", "/api/v1/fine-tunes/ft-1") == 3  # retried


@pytest.mark.slow
def test_a_deploy_whose_answer_is_lost_and_cannot_be_found_is_not_sent_again(busy):
    with pytest.raises(OpdError) as lost:
        cloud(busy).deploy("qwen3.5-9b", plan="lora", yes=True)
    assert busy.count(*DEPLOY_CREATE) == 1 and busy.count("GET", DEPLOYMENTS) == 2  # looked for, twice
    assert "not sent again" in lost.value.message and "opd deployments" in (lost.value.fix or "")


# ---- the consent book: spent when sent; a repeat finds, never resends -------------------------------------
def test_a_token_is_spent_when_its_request_is_sent_and_a_repeat_finds_what_it_made():
    book, sent, made = ConsentBook(), [], {}

    def start(yes: bool, request_id: str | None) -> str:
        if not yes:
            raise OpdError("nothing sent: ...", code=NEEDS_CONFIRMATION)
        sent.append(request_id)
        made[request_id] = f"dep-{request_id}"  # the plane carried it out ...
        raise OpdError("deploy failed: [500 InternalError]", status=500)  # ... and the answer was lost

    token = book.run("deploy", lambda: "fp", start, None).refusal.token
    with pytest.raises(OpdError):
        book.run("deploy", lambda: "fp", start, token, made.get)
    again = book.run("deploy", lambda: "fp", start, token, made.get)
    assert again.repeated and again.result == f"dep-{sent[0]}" and len(sent) == 1
    assert book.run("deploy", lambda: "fp", start, token, made.get).result == again.result and len(sent) == 1

    other = book.run("deploy", lambda: "fp", start, None).refusal.token  # nothing found: refused, not resent
    with pytest.raises(OpdError):
        book.run("deploy", lambda: "fp", start, other, lambda rid: None)
    with pytest.raises(OpdError) as spent:
        book.run("deploy", lambda: "fp", start, other, lambda rid: None)
    assert spent.value.code == SPENT_TOKEN and len(sent) == 2 and "nothing sent" in spent.value.message
    assert "the plane shows nothing it started" in spent.value.message

    calls = book.run("evaluate", lambda: "fp", start, None).refusal.token  # chat calls: nothing to look up
    with pytest.raises(OpdError):
        book.run("evaluate", lambda: "fp", start, calls)
    with pytest.raises(OpdError) as unfindable:
        book.run("evaluate", lambda: "fp", start, calls)
    assert (
        unfindable.value.code == SPENT_TOKEN and len(sent) == 3
    )  # not sent again, and not said to be looked up
    assert "leaves nothing on the plane to look up" in unfindable.value.message


# ---- the fingerprint: every file the request reads, none the SDK writes ----------------------------------
def _outside(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(workspace, its config moved outside it, a validation file outside it named by absolute path)."""
    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=24)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    val = outside / "val.jsonl"
    val.write_text((ws / "data" / "validation.jsonl").read_text())
    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    for dataset in cfg["datasets"]:
        if dataset["type"] == "validation":
            dataset["file_name"] = str(val)
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    moved = outside / "job.yaml"
    for dataset in cfg["datasets"]:  # the moved config names the workspace's files by absolute path
        if dataset["type"] == "training":
            dataset["file_name"] = str(ws / dataset["file_name"])
    moved.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return ws, moved, val


def test_the_fingerprint_binds_files_outside_the_workspace_and_not_what_the_sdk_writes(tmp_path):
    ws, moved, val = _outside(tmp_path)
    target = resolve_target("local", base_url="http://127.0.0.1:1/api/v1")

    def fp(config: str = "config.yaml") -> str:
        return request_fingerprint("submit", target, {"config": config}, str(ws), config)

    inside, outside_cfg = fp(), fp(str(moved))
    (ws / "start.sh").write_text("#!/bin/sh\n# written by the SDK on submit\n")  # the SDK's, not sent
    assert fp() == inside and fp(str(moved)) == outside_cfg
    val.write_text(val.read_text() + val.read_text().splitlines(keepends=True)[0])  # data outside the folder
    assert fp() != inside
    before = fp(str(moved))
    moved.write_text(moved.read_text().replace("n_epochs: 1", "n_epochs: 2"))  # a config outside the folder
    assert fp(str(moved)) != before


def _mcp(calls: list[tuple[str, dict]]) -> list:
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> list:
        async with Client(build()) as client:
            return [await client.call_tool(tool, args) for tool, args in calls]

    return anyio.run(go)


@pytest.mark.slow
def test_an_agents_token_is_refused_after_a_file_outside_the_workspace_changes(
    tmp_path, cloud_env, monkeypatch
):
    ws, _, val = _outside(tmp_path)
    proxy = CountingProxy(NOWHERE)
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    args = {
        "workspace": str(ws),
        "models": ["qwen3.5-9b"],
        "rows": 2,
        "target": "cloud",
        "base_url": proxy.api_base,
    }
    try:
        (asked,) = _mcp([("evaluate", args)])
        token = asked.structured_content["confirmation"]["confirmation_token"]
        val.write_text(val.read_text().replace("\n", "\n\n", 1))  # edited after the user said yes
        (confirmed,) = _mcp([("evaluate", {**args, "confirmation_token": token})])
    finally:
        proxy.close()
    assert confirmed.is_error and "another evaluate request" in confirmed.content[0].text
    assert proxy.requests == []  # nothing sent


@pytest.mark.slow  # the submit preview runs submit_job.py --dry-run
def test_an_agents_submit_token_is_refused_after_its_config_outside_the_workspace_changes(
    tmp_path, cloud_env, monkeypatch
):
    ws, moved, _ = _outside(tmp_path)
    proxy = CountingProxy(NOWHERE)
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    args = {"workspace": str(ws), "config": str(moved), "target": "cloud", "base_url": proxy.api_base}
    try:
        (asked,) = _mcp([("submit", args)])
        assert not asked.is_error, asked.content[0].text
        token = asked.structured_content["confirmation"]["confirmation_token"]
        moved.write_text(moved.read_text().replace("n_epochs: 1", "n_epochs: 2"))  # edited after the yes
        (confirmed,) = _mcp([("submit", {**args, "confirmation_token": token})])
    finally:
        proxy.close()
    assert confirmed.is_error and "another submit request" in confirmed.content[0].text
    assert proxy.requests == []  # nothing sent


@pytest.mark.slow
def test_a_token_is_refused_for_another_argument_target_tool_or_a_forged_one_and_nothing_is_sent(
    tmp_path, cloud_env, monkeypatch
):
    """The consent matrix's other rows, through the real `mcp` client: a token issued for one deploy is
    refused for another model, another capacity, another Bailian host, another paid tool and when made
    up; none of those calls reaches either host, and the token still starts its own request after them."""
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=24)
    proxy, elsewhere = CountingProxy(NOWHERE), CountingProxy(NOWHERE)
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    args = {"model": "qwen3.5-9b", "wait": False, "target": "cloud", "base_url": proxy.api_base}
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> tuple[str, list[str]]:
        async with Client(build()) as client:
            asked = await client.call_tool("deploy", args)
            token = asked.structured_content["confirmation"]["confirmation_token"]
            refused = []
            for tool, other in (
                ("deploy", {**args, "model": "qwen3-8b"}),  # another argument
                ("deploy", {**args, "capacity": 2}),  # another argument's value
                ("deploy", {**args, "base_url": elsewhere.api_base}),  # another host (allowed a key too)
                (
                    "evaluate",
                    {
                        "workspace": str(ws),
                        "models": ["qwen3.5-9b"],
                        "rows": 2,
                        "target": "cloud",
                        "base_url": proxy.api_base,
                    },
                ),  # another tool  # fmt: skip
                ("deploy", {**args, "confirmation_token": "opd-confirm-made-up"}),  # forged
            ):
                host = other.get("base_url", proxy.api_base)
                monkeypatch.setenv("OPD_CLOUD_BASE_URL", host)  # the key may go there: only the token refuses
                answer = await client.call_tool(tool, {"confirmation_token": token, **other})
                assert answer.is_error, (tool, other, answer.content[0].text)
                refused.append(answer.content[0].text)
            confirmed = await client.call_tool("deploy", {**args, "confirmation_token": token})
            return confirmed.content[0].text, refused

    try:
        confirmed, refused = anyio.run(go)
    finally:
        proxy.close()
        elsewhere.close()
    assert all("nothing sent" in r for r in refused), "\n".join(refused)
    assert ["another deploy request" in r for r in refused] == [True] * 4 + [False]
    assert "unknown or expired" in refused[-1]
    assert elsewhere.requests == [] and proxy.count(*DEPLOY_CREATE) == 1, confirmed  # only its own request


# ---- deploy and evaluate confirmations: the model, the price, warnings, estimate, request ---------------
@pytest.mark.slow
def test_deploy_and_eval_confirmations_name_the_model_and_the_price_in_each_surfaces_words(
    tmp_path, cloud_env, monkeypatch, capsys
):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=24)
    proxy = CountingProxy(NOWHERE)
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    monkeypatch.setenv("OPD_DEPLOY_PRICE_PER_UNIT_HOUR", "7.5")
    where = {"target": "cloud", "base_url": proxy.api_base}
    spec = {"input_tpm": 100000, "output_tpm": 20000}
    try:
        dep, lora, ev = _mcp([
            ("deploy", {"model": "qwen3.5-9b", "plan": "ptu", "deploy_spec": spec, "capacity": 2, **where}),
            ("deploy", {"model": "qwen3.5-9b", **where}),
            ("evaluate", {"workspace": str(ws), "models": ["qwen3.5-9b", "qwen3-8b"], "rows": 3, **where}),
        ])  # fmt: skip
        with pytest.raises(SystemExit):
            main(["deploy", "qwen3.5-9b", "--plan", "ptu", "--deploy-spec", json.dumps(spec), "--capacity", "2",
                  "--cloud"])  # fmt: skip
    finally:
        proxy.close()
    assert proxy.requests == []
    d = dep.structured_content["confirmation"]
    assert "of qwen3.5-9b" in d["summary"] and "15.00 per hour" in d["summary"] and "--yes" not in d["fix"]
    assert d["estimate"]["money_per_hour"] == 15.0 and d["request"]["body"]["deploy_spec"] == spec
    assert any("undeploy" in w for w in d["warnings"])
    assert "per token" in lora.structured_content["confirmation"]["summary"]
    e = ev.structured_content["confirmation"]
    assert (
        "qwen3.5-9b, qwen3-8b" in e["summary"] and e["estimate"]["calls"] == 6 and e["request"]["calls"] == 6
    )
    assert e["warnings"] and "--yes" not in e["summary"] + e["fix"]
    err = capsys.readouterr().err  # the terminal: the same line, and its own way to consent
    assert "of qwen3.5-9b" in err and "15.00 per hour" in err and "--yes" in err


@pytest.mark.slow
def test_a_cloud_eval_sends_each_call_once_on_503_and_its_token_never_sends_again(
    tmp_path, cloud_env, monkeypatch
):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=24)
    proxy = CountingProxy(NOWHERE)
    proxy.fault(*CHAT, 503, forward=False, times=100)
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    args = {
        "workspace": str(ws),
        "models": ["qwen3.5-9b"],
        "rows": 3,
        "target": "cloud",
        "base_url": proxy.api_base,
    }
    try:
        (asked,) = _mcp([("evaluate", args)])
        token = asked.structured_content["confirmation"]["confirmation_token"]
        first, again = _mcp([("evaluate", {**args, "confirmation_token": token})] * 2)
    finally:
        proxy.close()
    assert first.structured_content["status"] == "started"
    assert again.structured_content["status"] == "already_started"
    assert proxy.count(*CHAT) == 3  # three rows, each sent once, none again


# ---- a lost answer against the real plane: CLI and agent (slow: `opd serve`, the SDK) -------------------
@pytest.fixture()
def lossy(local_server, cloud_env, monkeypatch):
    proxy = CountingProxy(local_server.base_url)
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", proxy.api_base)
    yield proxy
    proxy.close()


def _local(local_server) -> JobClient:
    return JobClient(resolve_target("local", base_url=local_server.api_base))


@pytest.mark.slow
def test_cli_deploy_whose_answer_is_lost_reports_the_one_deployment_it_made(lossy, local_server, capsys):
    lossy.fault(*DEPLOY_CREATE)  # created upstream, answered 500
    with pytest.raises(SystemExit) as done:
        main(["deploy", "local/tiny-student", "--cloud", "--yes", "--no-wait", "--json"])
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    name = json.loads(out)["deployed_model"]
    try:
        assert lossy.count(*DEPLOY_CREATE) == 1 and "answer to this start was lost" in err
        names = [d.deployed_model for d in _local(local_server).deployments(size=100).deployments]
        assert names.count(name) == 1
    finally:
        _local(local_server).undeploy(name)


@pytest.mark.slow
def test_an_agents_repeat_after_a_lost_deploy_answer_is_already_started(lossy, local_server):
    lossy.fault(*DEPLOY_CREATE)  # created upstream, answered 500 ...
    lossy.fault("GET", DEPLOYMENTS, 503, forward=False, times=4)  # ... and the lookup fails too (3 retries)
    args = {"model": "local/tiny-student", "wait": False, "target": "cloud", "base_url": lossy.api_base}
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> list:
        async with Client(build()) as client:
            asked = await client.call_tool("deploy", args)
            token = asked.structured_content["confirmation"]["confirmation_token"]
            confirmed = {**args, "confirmation_token": token}
            return [await client.call_tool("deploy", confirmed) for _ in range(3)]

    lost, found, again = anyio.run(go)
    name = found.structured_content["result"]["deployed_model"]
    try:
        assert lost.is_error  # the answer and the lookup were lost: the agent is told, nothing resent
        assert [found.structured_content["status"], again.structured_content["status"]] == [
            "already_started"
        ] * 2
        assert again.structured_content["result"]["deployed_model"] == name
        assert lossy.count(*DEPLOY_CREATE) == 1
    finally:
        _local(local_server).undeploy(name)


@pytest.mark.slow  # the SDK submits a reward workspace twice over (CLI, then agent)
def test_a_lost_submit_answer_finds_the_job_and_a_repeat_is_already_started(
    lossy, local_server, tmp_path, capsys
):
    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=24)
    local = _local(local_server)
    lossy.fault(*JOB_CREATE)
    with pytest.raises(SystemExit) as done:
        main(["submit", str(ws), "--cloud", "--yes"])
    out = "".join(capsys.readouterr())
    assert done.value.code == 0 and lossy.job_creations() == 1, out
    assert "answer to this start was lost (HTTP 500, code InternalError" in out  # the script found it
    stop_jobs(local)

    lossy.fault(*JOB_CREATE)  # the agent: the same lost answer, then the confirmed call repeated
    args = {"workspace": str(ws), "target": "cloud", "base_url": lossy.api_base}
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> list:
        async with Client(build()) as client:
            asked = await client.call_tool("submit", args)
            token = asked.structured_content["confirmation"]["confirmation_token"]
            confirmed = {**args, "confirmation_token": token}
            return [await client.call_tool("submit", confirmed) for _ in range(2)]

    first, again = anyio.run(go)
    try:
        assert not first.is_error, first.content[0].text
        assert first.structured_content["status"] == "started"
        assert any("answer to this start was lost" in n for n in first.structured_content["result"]["notes"])
        assert (ws / "start.sh").is_file()  # the SDK wrote it: the repeat is still the same request
        assert again.structured_content["status"] == "already_started", again.content[0].text
        ids = {r.structured_content["result"]["job"]["job_id"] for r in (first, again)}
        assert len(ids) == 1 and lossy.job_creations() == 2
    finally:
        stop_jobs(local)


@pytest.mark.slow  # a sweep of two jobs through the SDK
def test_a_sweep_whose_second_answer_is_lost_finds_it_and_an_agents_repeat_is_already_started(
    lossy, local_server, tmp_path, capsys
):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=24)
    local = _local(local_server)
    lossy.fault(*JOB_CREATE, times=2)  # both jobs are created upstream; both answers are lost
    params = ["learning_rate=1e-6,2e-6"]
    args = {"workspace": str(ws), "params": params, "target": "cloud", "base_url": lossy.api_base}
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> list:
        async with Client(build()) as client:
            asked = await client.call_tool("sweep", args)
            token = asked.structured_content["confirmation"]["confirmation_token"]
            confirmed = {**args, "confirmation_token": token}
            return [await client.call_tool("sweep", confirmed) for _ in range(2)]

    try:
        first, again = anyio.run(go)
        assert not first.is_error, first.content[0].text
        assert first.structured_content["status"] == "started" and lossy.job_creations() == 2
        assert again.structured_content["status"] == "already_started" and lossy.job_creations() == 2
        jobs = [j["job_id"] for j in first.structured_content["result"]["jobs"]]
        assert len(set(jobs)) == 2 and jobs == [
            j["job_id"] for j in again.structured_content["result"]["jobs"]
        ]
    finally:
        stop_jobs(local)


# ---- a repeat whose first send lost both its answer and every lookup: found by the token's request id -----
JOB_LIST = ("GET", "/api/v1/fine-tunes")  # what finding a start by its request id asks


def _confirm_twice_losing_the_first(tool: str, args: dict, proxy: CountingProxy) -> tuple:
    """An agent's `tool`: asked, then confirmed while every create's answer and every job listing is lost
    (the submit's own lookups fail too), then confirmed again with the same token once the network is well."""
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> tuple:
        async with Client(build()) as client:
            asked = await client.call_tool(tool, args)
            confirmed = {
                **args,
                "confirmation_token": asked.structured_content["confirmation"]["confirmation_token"],
            }
            proxy.fault(*JOB_CREATE)  # carried out upstream, answered 500
            proxy.fault(*JOB_LIST, 503, forward=False, times=1000)  # and no lookup gets an answer
            lost = await client.call_tool(tool, confirmed)
            proxy.clear_faults()
            return lost, await client.call_tool(tool, confirmed)

    return anyio.run(go)


@pytest.mark.slow  # the SDK submits through the stand-in
def test_an_agents_repeat_after_a_lost_submit_answer_and_lookup_finds_the_one_job(
    lossy, local_server, tmp_path
):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=16)
    local = _local(local_server)
    args = {"workspace": str(ws), "target": "cloud", "base_url": lossy.api_base}
    try:
        lost, again = _confirm_twice_losing_the_first("submit", args, lossy)
        assert lost.is_error and lossy.job_creations() == 1  # nothing found, nothing sent again
        assert again.structured_content["status"] == "already_started", again.content[0].text
        job_id = again.structured_content["result"]["job"]["job_id"]
        assert lossy.job_creations() == 1 and local.get(job_id).job_id == job_id
    finally:
        stop_jobs(local)


@pytest.mark.slow  # the SDK submits through the stand-in
def test_an_agents_repeat_of_a_sweep_cut_short_by_a_lost_answer_names_what_started_and_sends_nothing(
    lossy, local_server, tmp_path
):
    """The first job's answer and its lookups were lost, so the sweep stopped there: the second job was
    never sent. The repeat must neither send it nor say the plane shows nothing: the first job runs."""
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=16)
    local = _local(local_server)
    args = {"workspace": str(ws), "params": ["learning_rate=1e-6,2e-6"], "target": "cloud",
            "base_url": lossy.api_base}  # fmt: skip
    try:
        lost, again = _confirm_twice_losing_the_first("sweep", args, lossy)
        assert lost.is_error and lossy.job_creations() == 1
        started = [j.job_id for j in local.list(size=100).jobs if "-0-" in (j.job_name or "")]
        text = again.content[0].text
        assert again.is_error and lossy.job_creations() == 1, text  # the second job is not sent now either
        assert "1 of 2" in text and started[0] in text and "learning_rate=2e-6" in text, text
        assert "shows nothing" not in text
    finally:
        stop_jobs(local)
