"""Deployments on `opd serve`: the unmodified SDK's `Deployments` API end to end, bad input, the limit,
and the process rules (deployments come back after a restart; none outlives the server)."""

from __future__ import annotations

import json
import time

import pytest
from conftest import run_sdk
from pydantic import SecretStr

from opd_nb.client import JobClient, Target
from opd_nb.errors import OpdError

pytestmark = pytest.mark.slow

LIFECYCLE = r"""
import json, time
from dashscope import Deployments, Generation
msgs = [{"role": "system", "content": "Sort the digits."}, {"role": "user", "content": "93418"}]
out = {}
dep = Deployments.call(model="qwen3-8b", capacity=1, suffix="sdk")
name = dep.output.deployed_model
out["create"] = [dep.status_code, dep.output.status, name, dep.output.capacity, dep.output.model_name]
for _ in range(900):
    got = Deployments.get(name)
    if got.output.status != "PENDING":
        break
    time.sleep(0.2)
out["get"] = [got.status_code, got.output.status, got.output.ready_capacity, got.output.base_model]
out["list"] = [d.deployed_model for d in Deployments.list(page_no=1, page_size=50).output.deployments]
scaled = Deployments.scale(name, capacity=2)
out["scale"] = [scaled.status_code, scaled.output.capacity]
gen = Generation.call(model=name, messages=msgs, result_format="message", temperature=0, max_tokens=16)
out["gen"] = [gen.status_code, gen.output.choices[0].message.content]
gone = Deployments.delete(name)
out["delete"] = [gone.status_code, gone.output.status]
after = Generation.call(model=name, messages=msgs, result_format="message")
out["after"] = [after.status_code, after.code, after.message]
again = Deployments.get(name)
out["get_deleted"] = [again.status_code, again.code, again.message]
print(json.dumps(out))
"""


def test_sdk_deployments_call_get_list_scale_delete(local_server, tmp_path):
    proc = run_sdk(local_server, LIFECYCLE, tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    status, state, name, capacity, model = out["create"]
    assert (status, state, capacity, model) == (200, "PENDING", 1, "qwen3-8b") and name == "qwen3-8b-sdk"
    assert out["get"] == [200, "RUNNING", 1, "qwen3-8b"]
    assert name in out["list"]
    assert out["scale"] == [200, 2]
    assert out["gen"][0] == 200 and out["gen"][1]
    assert out["delete"] == [200, "DELETED"]
    status, code, message = out["after"]
    assert (
        (status, code) == (400, "ModelNotDeployed")
        and "was deleted" in message
        and "opd deploy qwen3-8b" in message
    )
    status, code, message = out["get_deleted"]
    assert (status, code) == (404, "DeploymentNotFound") and "deploy 'qwen3-8b' again" in message


def test_bad_deployment_requests_are_4xx_with_a_fix(api):
    cases = [
        ({"model_name": "qwen3-8b", "capacity": 0}, 400, "InvalidParameter", "use capacity=1"),
        ({"model_name": "qwen3-8b", "capacity": "two"}, 400, "InvalidParameter", "whole number"),
        ({"model_name": "no/such-model", "capacity": 1}, 400, "ModelNotFound", "--model-map"),
        (
            {"model_name": "opd-local/ft-202001010000-dead", "capacity": 1},
            400,
            "ModelNotFound",
            "GET /api/v1/models",
        ),
        (
            {"model_name": "qwen3-8b", "capacity": 1, "suffix": "a/b"},
            400,
            "InvalidParameter",
            "suffix must be",
        ),
        ({"capacity": 1}, 400, "InvalidParameter", "model_name is required"),
    ]
    for body, status, code, fix in cases:
        r = api.post("/deployments", json=body)
        assert (r.status_code, r.json()["code"]) == (status, code), (body, r.text)
        assert fix in r.json()["message"], (body, r.text)
    missing = api.get("/deployments/no-such-deployment")
    assert missing.status_code == 404 and missing.json()["code"] == "DeploymentNotFound"
    assert "opd deployments" in missing.json()["message"]
    assert api.delete("/deployments/no-such-deployment").status_code == 404
    assert api.put("/deployments/no-such-deployment/scale", json={"capacity": 0}).status_code == 400


def _members(data_dir, name):
    from opd_nb.server import process_tree
    from opd_nb.server.deploy.manager import owner

    return process_tree.members(data_dir, owner(name))


def _gone(data_dir, name, timeout=20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _members(data_dir, name):
            return True
        time.sleep(0.2)
    return False


def test_limit_restart_and_no_deployment_outlives_the_server(tmp_path, monkeypatch):
    from opd_nb.server import start

    monkeypatch.setenv("OPD_MAX_DEPLOYMENTS", "3")  # the flag (`opd serve --max-deployments 1`) wins
    server = start(port=0, data_dir=tmp_path, max_deployments=1)

    def client_of(handle):
        return JobClient(Target(kind="local", base_url=handle.api_base, api_key=SecretStr("test")), retries=0)

    try:
        client = client_of(server)
        name = client.deploy("local/tiny-student", suffix="one").deployed_model
        with pytest.raises(OpdError) as info:
            client.deploy("qwen3-8b", suffix="two")
        assert (info.value.status, info.value.code) == (400, "DeploymentLimitExceeded")
        assert (
            "at most 1" in info.value.message
            and name in info.value.message
            and "--max-deployments N" in info.value.message
            and "undeploy" in info.value.message
        )
        assert client.wait_deployed(name, poll_s=0.2, timeout_s=180).running
        assert _members(tmp_path, name)
    finally:
        server.stop()
    assert _gone(tmp_path, name), "a deployment outlived a stopped server"

    server = start(port=0, data_dir=tmp_path)  # it comes back after a restart
    try:
        client = client_of(server)
        assert client.deployment(name).status in ("PENDING", "RUNNING")
        assert client.wait_deployed(name, poll_s=0.2, timeout_s=180).running
        assert client.chat(name, "123", temperature=0, max_tokens=4).content is not None
        assert [d.deployed_model for d in client.deployments().deployments] == [name]
    finally:
        server.kill()  # a crash: the serving process notices its parent is gone and exits
    assert _gone(tmp_path, name), "a deployment outlived a killed server"
