"""After the job, on `opd serve`: checkpoints that expire, export, v2 deployments with plans and their
event stream, lineage through a continued job, and inference that answers like Bailian (`n`,
`logprobs`, `stop`, model-not-found), through the real `dashscope` SDK and the real `openai` client.

The job is the session's finished pure-distillation job (conftest's `finished_job`): nothing trains
here except the one continued job of the lineage test. SDK code runs in a subprocess with only the
SDK's two variables set (dashscope reads them at import).
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from conftest import SDK_SUBMIT, run_sdk, stop_jobs, wait_status

from opd_nb.client import JobClient, resolve_target
from opd_nb.client.jobs import require_deploy_consent
from opd_nb.errors import OpdError
from opd_nb.server.job.views import checkpoint_listing
from opd_nb.server.store.job_record import JobMeta, JobRecord
from opd_nb.wire.deploy_plans import check_plan, plan_problems

SORT = [{"role": "system", "content": "Sort the digits."}, {"role": "user", "content": "93418"}]


@pytest.fixture(scope="module")
def client(local_server) -> JobClient:
    return JobClient(resolve_target("local", base_url=local_server.api_base))


@pytest.fixture(scope="module")
def openai_client(local_server):
    import openai

    return openai.OpenAI(
        base_url=local_server.base_url + "/compatible-mode/v1", api_key="test", max_retries=0
    )


# ---- pure rules (fast) -------------------------------------------------------------------------------
def test_checkpoint_expiry_and_order(tmp_path):
    meta = JobMeta(training_type="pg_opd", student_path="s", teacher_path="t", train_file="train.jsonl")
    job = JobRecord(
        job_id="ft-202001010000-abcd",
        seq=1,
        job_name="j",
        status="SUCCEEDED",
        request={},
        meta=meta,
        create_time="",
    )
    for s in (2, 4):
        (tmp_path / f"checkpoint-{s}").mkdir()
    cps = [
        {
            "name": f"checkpoint-{s}",
            "step": s,
            "path": str(tmp_path / f"checkpoint-{s}"),
            "created_at": when,
            "metrics": {},
        }
        for s, when in ((2, "2026-01-01 10:00:00"), (4, time.strftime("%Y-%m-%d %H:%M:%S")))
    ]
    out = [e.wire() for e in checkpoint_listing(job, [dict(c) for c in cps], ttl_days=15)]
    assert [e["step"] for e in out] == [4, 2]  # newest step first, as Bailian sorts
    assert out[1]["checkpoint_id"] == "ft-202001010000-abcd:checkpoint-2"
    assert out[1]["expire_time"] == "2026-01-16 10:00:00" and out[1]["status"] == "EXPIRED"
    assert out[0]["status"] == "SUCCEEDED" and out[0]["model_name"] is None
    assert [e.status for e in checkpoint_listing(job, [dict(c) for c in cps], ttl_days=0)] == ["EXPIRED"] * 2


def test_plans_need_their_fields_and_a_paid_deploy_needs_yes():
    assert plan_problems("lora") == [] and plan_problems(None) == []
    mu = plan_problems("mu")
    assert any("deploy_spec" in p for p in mu) and any("billing_method" in p for p in mu)
    assert plan_problems("mu", {"spec": "MU1"}, "POST_PAY") == []
    assert "input_tpm and deploy_spec.output_tpm" in plan_problems("ptu", {})[0]
    assert "not one of" in plan_problems("gold")[0]
    with pytest.raises(OpdError, match="plan 'mu' needs deploy_spec"):
        check_plan("mu", None, "POST_PAY")
    require_deploy_consent("local", "qwen3-8b", "mu", 1, yes=False)  # nothing is paid locally
    with pytest.raises(OpdError, match="paid Bailian deployment of qwen3-8b") as exc:
        require_deploy_consent("cloud", "qwen3-8b", "lora", 1, yes=False)
    assert exc.value.code == "needs-confirmation" and "--yes" in exc.value.fix


# ---- export, deploy, call (slow: deployments start serving processes) -------------------------------
EXPORTED = r"""
import json, sys, time
from dashscope import Deployments, Generation
name = sys.argv[1]
msgs = [{"role": "system", "content": "Sort the digits."}, {"role": "user", "content": "93418"}]
dep = Deployments.call(model=name, capacity=1, suffix="exp")
dm = dep.output.deployed_model
for _ in range(900):
    got = Deployments.get(dm)
    if got.output.status != "PENDING":
        break
    time.sleep(0.2)
out = {"create": [dep.status_code, dep.output.model_name, got.output.status, got.output.base_model]}
gen = Generation.call(model=dm, messages=msgs, result_format="message", temperature=0, max_tokens=8,
                      n=2, logprobs=True, top_logprobs=2)
out["gen"] = [gen.status_code, len(gen.output.choices), gen.output.choices[0].logprobs["content"][0]]
text = Generation.call(model=dm, messages=msgs, result_format="text", n=2)
out["text_n"] = [text.status_code, text.code, text.message]
print(json.dumps({**out, "deployed_model": dm}))
"""


@pytest.mark.slow
def test_export_a_checkpoint_then_deploy_and_call_it(
    finished_job, client, api, local_server, openai_client, tmp_path
):
    job = finished_job("pure-distill").job
    cps = client.checkpoints(job.job_id)
    assert [c.step for c in cps] == sorted((c.step for c in cps), reverse=True)
    assert all(13 < (c.expires_in_days() or 0) <= 15 for c in cps)
    early = next(c for c in cps if not c.published)
    # (model_name: None until exported; the CLI tests may export it first in this session, so not asserted)
    assert early.checkpoint_id == f"{job.job_id}:checkpoint-{early.step}"
    exported = client.export_checkpoint(job.job_id, early.name, model_name="my early step")
    assert exported.model_name and exported.model_name.endswith(f"-{job.job_id}-ckpt-{early.step}")
    again = api.get(f"/fine-tunes/{job.job_id}/export/{early.checkpoint_id}", params={"model_name": "other"})
    assert again.status_code == 200 and again.json()["output"] is True
    assert (
        client.export_checkpoint(job.job_id, str(early.step)).model_name == exported.model_name
    )  # idempotent
    for path in (
        f"/fine-tunes/{job.job_id}/export/checkpoint-9999",
        "/fine-tunes/ft-202001010000-dead/export/x",
    ):
        missing = api.get(path)
        body = missing.json()
        assert missing.status_code == 404 and {"request_id", "code", "message"} <= set(body), body
    with pytest.raises(OpdError) as undeployed:  # exported, not deployed: says to deploy it
        client.chat(exported.model_name, "93418")
    assert undeployed.value.code == "ModelNotDeployed" and "opd deploy" in undeployed.value.message

    proc = run_sdk(local_server, EXPORTED, tmp_path, exported.model_name, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["create"] == [200, exported.model_name, "RUNNING", job.raw["base_model"]]
    status, n_choices, first = out["gen"]
    assert (status, n_choices) == (200, 2) and first["logprob"] <= 0 and len(first["top_logprobs"]) == 2
    assert out["text_n"][0] == 400 and 'result_format="message"' in out["text_n"][2]
    with pytest.raises(Exception) as named:  # the openai client, with the exported name: names deployed_model
        openai_client.chat.completions.create(model=exported.model_name, messages=SORT, max_tokens=4)
    assert out["deployed_model"] in str(named.value)
    client.undeploy(out["deployed_model"])


V2_DEPLOY = r"""
import json
import dashscope
c = dashscope.Client()
out = {}
try:
    c.deployments.create(model="qwen3-8b", capacity=1, plan="mu", billing_method="POST_PAY")
except Exception as exc:
    out["mu_no_spec"] = [type(exc).__name__, getattr(exc, "status_code", None), str(exc)]
dep = c.deployments.create(model="qwen3-8b", capacity=1, plan="mu", deploy_spec={"spec": "MU1"},
                           billing_method="POST_PAY", suffix="v2mu")
out["mu"] = [dep.is_error, dep.deployed_model, dep.status, dep.charge_type]
out["events"] = [e.output["status"] for e in c.deployments.stream_events(dep.deployed_model)]
got = c.deployments.get(dep.deployed_model)
out["get"] = [got.status, got.ready_capacity, got.base_model, got.model]
out["delete"] = c.deployments.delete(dep.deployed_model).status
print(json.dumps(out))
"""


@pytest.mark.slow
def test_v2_deployments_plans_and_event_stream(local_server, tmp_path):
    proc = run_sdk(local_server, V2_DEPLOY, tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    kind, status, message = out["mu_no_spec"]
    assert status == 400 and "InvalidParameter" in message and "plan 'mu' needs deploy_spec" in message, kind
    assert out["mu"][0] is False and out["mu"][2] == "PENDING" and out["mu"][3] == "POST_PAY"
    assert out["events"] == ["PENDING", "RUNNING"]
    assert out["get"] == ["RUNNING", 1, "qwen3-8b", "qwen3-8b"]


# ---- inference with the official openai client ------------------------------------------------------
@pytest.mark.slow
def test_openai_client_n_logprobs_stop_and_unknown_models(openai_client):
    import openai

    kw = {"model": "qwen3-8b", "messages": SORT, "max_tokens": 8}
    two = openai_client.chat.completions.create(n=2, temperature=1.0, seed=3, **kw)
    assert [c.index for c in two.choices] == [0, 1] and all(
        c.message.content is not None for c in two.choices
    )
    lp = openai_client.chat.completions.create(logprobs=True, top_logprobs=3, temperature=0, **kw)
    tokens = lp.choices[0].logprobs.content
    assert tokens and all(t.logprob <= 0 and len(t.top_logprobs) == 3 for t in tokens)
    assert "".join(t.token for t in tokens).strip() and lp.usage.completion_tokens == len(tokens)
    full = openai_client.chat.completions.create(temperature=0, **kw).choices[0].message.content
    cut = full.strip()[1:3]
    stopped = openai_client.chat.completions.create(temperature=0, stop=[cut], **kw).choices[0]
    assert stopped.finish_reason == "stop" and cut not in stopped.message.content
    assert full.startswith(stopped.message.content)
    with pytest.raises(openai.BadRequestError, match="frequency_penalty is not supported"):
        openai_client.chat.completions.create(frequency_penalty=0.5, **kw)
    with pytest.raises(openai.BadRequestError, match="not supported with stream"):
        openai_client.chat.completions.create(n=2, stream=True, **kw)
    with pytest.raises(openai.NotFoundError, match="--model-map no-such-model=") as exc:
        openai_client.chat.completions.create(**{**kw, "model": "no-such-model"})
    assert exc.value.status_code == 404
    ids = [m.id for m in openai_client.models.list()]
    assert {"local/tiny-student", "qwen3-8b", "qwen3.5-9b"} <= set(ids) and "no-such-model" not in ids


def test_unknown_model_is_bailians_not_found_on_both_apis(api, local_server):
    r = api.post(
        "/services/aigc/text-generation/generation",
        json={"model": "no-such-model", "input": {"messages": SORT}, "parameters": {}},
    )
    assert (
        r.status_code == 404 and r.json()["code"] == "ModelNotFound" and "--model-map" in r.json()["message"]
    )
    bad = api.post(
        "/services/aigc/text-generation/generation",
        json={"model": "qwen3-8b", "input": {"messages": SORT}, "parameters": {"top_k": 5}},
    )
    assert bad.status_code == 400 and "top_k is not supported" in bad.json()["message"]


# ---- the job list, usage, lineage --------------------------------------------------------------------
@pytest.mark.slow
def test_job_list_filters_by_model_and_carries_usage(finished_job, api):
    job = finished_job("pure-distill").job
    model = job.raw["model"]
    # The session's server holds many jobs of this model (other tests submit them too): one full page.
    listed = api.get("/fine-tunes", params={"model": model, "page_size": 100}).json()["output"]
    assert listed["jobs"] and all(j["model"] == model for j in listed["jobs"])
    assert listed["total"] == len(listed["jobs"]), listed["total"]
    mine = next(j for j in listed["jobs"] if j["job_id"] == job.job_id)
    assert isinstance(mine["usage"], int) and mine["usage"] > 0
    assert api.get("/fine-tunes", params={"model": "qwen-none-such"}).json()["output"]["total"] == 0


@pytest.mark.slow
def test_a_continued_job_reports_the_root_base_model(finished_job, local_server, client):
    shared = finished_job("pure-distill")
    parent = shared.job
    proc = run_sdk(local_server, SDK_SUBMIT, shared.workspace, parent.finetuned_output)
    assert proc.returncode == 0, proc.stderr[-3000:]
    child_id = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JOB ")).split()[1]
    raw = httpx.get(
        f"{local_server.api_base}/fine-tunes/{child_id}", headers={"Authorization": "Bearer t"}
    ).json()["output"]
    assert raw["model"] == parent.finetuned_output
    assert raw["base_model"] == parent.raw["base_model"] and raw["local"]["parents"] == [parent.job_id]
    stop_jobs(client, [child_id])
    wait_status(client, child_id, {"CANCELED", "SUCCEEDED", "FAILED"}, timeout=120)


def test_monitor_checkpoint_table_shows_expiry_best_export_name_and_the_export_line():
    from opd_nb.client import Checkpoint
    from opd_nb.notebook import monitor_html
    from opd_nb.notebook.job_state import JobState, job_view

    soon = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() + 3 * 86400 + 600))
    cps = [
        Checkpoint(name="checkpoint-4", step=4, expire_time=soon, model_name="qwen3-8b-ft-x-ckpt-4"),
        Checkpoint(name="checkpoint-2", step=2, expire_time="2020-01-01 00:00:00"),
    ]
    rows = [{"step": s, "actor/distillation/loss": 1.0 / s} for s in (1, 2, 3, 4)]
    st = JobState(job_id="ft-202001010000-abcd", status="SUCCEEDED", metrics=rows, checkpoints=cps)
    html = monitor_html.checkpoints_html({"jobs": {st.job_id: job_view(st, log_tail=5)}})
    assert "expires in 3 days" in html and "expired" in html and "qwen3-8b-ft-x-ckpt-4" in html
    assert "best" in html and "opd export ft-202001010000-abcd CHECKPOINT" in html
