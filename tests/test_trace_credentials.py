"""A job's trace credential ends with the job, and spans from outside the job's steps change nothing.

Real `opd serve`, real local reward jobs: the job's reward function writes the OTLP headers opd serve
gave its function server (the credential the user's code can read) and holds its calls of one step
until the test opens a gate, so the test exports with that token while the job is known to be on that
step. Bodies are the OpenTelemetry SDK's spans in its OTLP exporter's own protobuf encoding.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest
import yaml
from conftest import SDK_SUBMIT, run_sdk, tiny_workspace
from server_http import H, job_view, wait_until

pytestmark = pytest.mark.slow

PB = {"Content-Type": "application/x-protobuf"}
ANCHOR = "from dashscope.finetune.reinforcement.component.observability import observe_processor\n"
PROCESS = "    async def process(self, input_data: RewardInput) -> RewardOutput:\n"
# written where the function server imports the reward: the credential its environment holds
LEAK = """
import asyncio as _asyncio
import os as _os
import pathlib as _pathlib

_DIR = _pathlib.Path({dir!r})
(_DIR / "headers").write_text(_os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS", ""))
"""
# the first thing each reward call does: the calls of step `hold` wait for the test's gate
GATE = """        _sid = str(getattr(input_data.request_metadata, "sample_id", "") or "")
        while _sid.startswith({hold!r}) and not (_DIR / "go").exists():
            await _asyncio.sleep(0.1)
"""


def _held_workspace(root: Path, hold: str, train_rows: int) -> tuple[Path, Path]:
    """A tiny reward workspace (8 prompts a step, evaluations before training and at the end) whose
    reward leaks its trace headers into the returned folder and holds step `hold` until ``go`` is there."""
    ws = tiny_workspace(
        "reward", root / "ws", train_rows=train_rows, val_rows=4, eval_steps=100, save_steps=100
    )
    spy = root / "spy"
    spy.mkdir()
    path = ws / "functions" / "reward" / "reward.py"
    text = path.read_text()
    assert ANCHOR in text and PROCESS in text
    text = text.replace(ANCHOR, ANCHOR + LEAK.format(dir=str(spy)))
    path.write_text(text.replace(PROCESS, PROCESS + GATE.format(hold=f"step {hold}-")))
    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    for fn in cfg["functions"]:
        fn["timeout"] = 900  # a held call is not a slow one
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return ws, spy


def _submit(server: object, ws: Path) -> str:
    proc = run_sdk(server, SDK_SUBMIT, ws)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return next(ln for ln in proc.stdout.splitlines() if ln.startswith("JOB ")).split()[1]


def _token(spy: Path) -> str:
    """The Bearer token in the function server's ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``."""
    headers = wait_until(lambda: (spy / "headers").exists() and (spy / "headers").read_text(), 300, "a token")
    name, _, value = unquote(headers).partition("=")
    assert name == "Authorization" and value.startswith("Bearer "), "tracing is off in the function server"
    return value.removeprefix("Bearer ")


def _export(steps: list[str]) -> bytes:
    """One traced reward call (two spans, one a failing tool) per sample id, as the SDK's exporter encodes them."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    from opd_nb.traces import ids

    mem = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "forged"}))
    provider.add_span_processor(SimpleSpanProcessor(mem))
    tracer = provider.get_tracer("t")
    for sample_id in steps:
        marks = {ids.SAMPLE_ID_KEY: sample_id, ids.ROLLOUT_ID_KEY: "0", ids.ATTEMPT_ID_KEY: "0"}
        with tracer.start_as_current_span("invoke_reward", attributes={**marks, "gen_ai.span.kind": "CHAIN"}):
            with tracer.start_as_current_span(
                "execute_tool t", attributes={**marks, "gen_ai.span.kind": "TOOL", "gen_ai.tool.name": "t"}
            ) as tool:
                tool.set_status(Status(StatusCode.ERROR, "forged"))
    return encode_spans(mem.get_finished_spans()).SerializeToString()


def _sample_id(span: object) -> str:
    from opd_nb.traces import ids

    attrs = {a.key: a.value.string_value for a in span.attributes}  # type: ignore[attr-defined]
    return attrs.get(ids.SAMPLE_ID_KEY, "")


def _post(server: object, token: str, body: bytes) -> httpx.Response:
    url = server.base_url + "/otlp/v1/traces"  # type: ignore[attr-defined]
    return httpx.post(url, content=body, headers={**PB, "Authorization": f"Bearer {token}"}, timeout=60)


def _rejected(resp: httpx.Response) -> tuple[int, str]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    assert resp.status_code == 200, resp.text
    reply = ExportTraceServiceResponse()
    reply.ParseFromString(resp.content)
    return reply.partial_success.rejected_spans, reply.partial_success.error_message


def _files(data_dir: Path, job_id: str) -> list[str]:
    folder = data_dir / "jobs" / job_id / "traces"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _metric_steps(api: str, job_id: str) -> list[int]:
    rows = httpx.get(f"{api}/fine-tunes/{job_id}/metrics", headers=H, timeout=60).json()["output"]
    return sorted({int(r["step"]) for r in rows.get("metrics", rows) if isinstance(r, dict)})


def _ended(resp: httpx.Response, words: str) -> None:
    assert resp.status_code == 401, resp.text
    body = resp.json()
    assert body["code"] == "InvalidTraceToken" and words in body["message"], body
    assert "\n" not in body["message"]


def _wait_step_traced(api: str, job_id: str, step: int) -> None:
    """Until the job's progress says `step` is done and that step's spans are on disk."""

    def traced() -> bool:
        progress = job_view(api, job_id).get("progress") or {}
        page = httpx.get(f"{api}/fine-tunes/{job_id}/traces", headers=H, timeout=60).json()["output"]
        return progress.get("step") == step and step in page["steps_by_kind"]["train"]

    wait_until(traced, 600, f"step {step} done and traced", every=0.5)
    time.sleep(1.5)  # the step's last export batch (the function servers send every 0.5 s)


def test_a_finished_jobs_token_is_refused_and_forged_steps_change_no_file_or_metrics_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from otlp_receiver import OtlpReceiver

    from opd_nb.server import start

    monkeypatch.setenv("OPD_ROLLOUTS_KEEP_STEPS", "2")  # retention at work within 5 steps
    data_dir = tmp_path / "data"
    ws, spy = _held_workspace(tmp_path, hold="3", train_rows=40)  # 5 steps; step 3 waits for the gate
    collector = OtlpReceiver()  # the user's --otlp-forward: it gets the job's spans, never forged ones
    server = start(data_dir=data_dir, otlp_forward=collector.url)
    try:
        api = server.api_base
        job_id = _submit(server, ws)
        token = _token(spy)
        _wait_step_traced(api, job_id, 2)  # steps 1 and 2 ran; step 3's calls are held
        before = _files(data_dir, job_id)
        assert before == ["train-000001.jsonl", "train-000002.jsonl", "validation-000000.jsonl"], before

        # during the job the token works: a span of a step it ran is stored
        assert _rejected(_post(server, token, _export(["step 2-0"]))) == (0, "")
        # steps it never runs are dropped, counted, and make no metrics row
        count, why = _rejected(_post(server, token, _export(["step 999999999-0", "step -1-0", "step 0-0"])))
        assert count == 3 * 2 and "has not run" in why, why
        # the audit's 50 forged steps past the plan, and 50 more among the steps it ran: no file goes
        forged = [f"step {s}-1" for s in range(1000, 1050)] + [f"step {1 + i % 2}-1" for i in range(50)]
        count, why = _rejected(_post(server, token, _export(forged)))
        assert count == 50 * 2, why
        assert _files(data_dir, job_id) == before
        assert max(_metric_steps(api, job_id)) <= 2
        # the user's collector gets the job's exports (in order), never one that named a step it has not run
        assert _rejected(_post(server, token, _export(["step 2-99"]))) == (0, "")  # after the forged ones
        wait_until(lambda: "step 2-99" in {_sample_id(s) for s in collector.spans}, 60, "the forward")
        forwarded = {_sample_id(span) for span in collector.spans}
        assert not forwarded & {"step 999999999-0", "step -1-0", "step 1000-1", "step 1049-1"}, forwarded

        (spy / "go").touch()
        job = wait_until(
            lambda: (v := job_view(api, job_id))["status"] in ("SUCCEEDED", "FAILED") and v, 600, "end"
        )
        assert job["status"] == "SUCCEEDED", job.get("message")
        # the documented rule for the real steps: the newest 2 train steps (4, 5) and every evaluation's
        final = _files(data_dir, job_id)
        assert final == ["train-000004.jsonl", "train-000005.jsonl", "validation-000000.jsonl",
                         "validation-000005.jsonl"], final  # fmt: skip
        assert _metric_steps(api, job_id) == [0, 1, 2, 3, 4, 5]

        # after the job the token is refused, and stores nothing
        _ended(
            _post(server, token, _export(["step 5-0"] + [f"step {s}-0" for s in range(1000, 1050)])),
            "SUCCEEDED",
        )
        assert _files(data_dir, job_id) == final and max(_metric_steps(api, job_id)) == 5
    finally:
        server.stop()
        collector.close()
    # a restarted server refuses it too (its signing secret is new, and the job's end is in the store)
    server = start(data_dir=data_dir)
    try:
        resp = _post(server, token, _export(["step 5-0"]))
        assert resp.status_code == 401 and resp.json()["code"] == "InvalidTraceToken"
        assert httpx.delete(f"{server.api_base}/fine-tunes/{job_id}", headers=H).status_code == 200
        assert _post(server, token, _export(["step 5-0"])).status_code == 401
    finally:
        server.stop()


def test_a_canceled_and_then_deleted_jobs_token_is_refused(tmp_path: Path) -> None:
    from opd_nb.server import start

    ws, spy = _held_workspace(tmp_path, hold="1", train_rows=24)  # step 1 waits for the gate
    data_dir = tmp_path / "data"
    server = start(data_dir=data_dir)
    try:
        api = server.api_base
        job_id = _submit(server, ws)
        token = _token(spy)
        wait_until(lambda: job_view(api, job_id)["status"] == "RUNNING", 300, "RUNNING")
        # before its first step is done the job may be sent its step 1 (and evaluation 0), nothing later
        assert _rejected(_post(server, token, _export(["step 1-0"]))) == (0, "")
        assert _rejected(_post(server, token, _export(["step 2-0"])))[0] == 2
        cancel = httpx.post(f"{api}/fine-tunes/{job_id}/cancel", headers=H, timeout=60)
        assert cancel.status_code == 200, cancel.text
        (spy / "go").touch()  # the held step ends; the worker sees the cancel and stops
        job = wait_until(
            lambda: (v := job_view(api, job_id))["status"] in ("CANCELED", "FAILED") and v, 300, "end"
        )
        assert job["status"] == "CANCELED", job.get("message")
        files = _files(data_dir, job_id)
        _ended(_post(server, token, _export(["step 1-0"])), "CANCELED")
        assert _files(data_dir, job_id) == files
        assert httpx.delete(f"{api}/fine-tunes/{job_id}", headers=H, timeout=60).status_code == 200
        _ended(_post(server, token, _export(["step 1-0"])), "deleted")
    finally:
        server.stop()
