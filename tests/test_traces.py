"""The trace pieces that need no job: OTLP bodies in, span trees, step numbers, the job token, and the
views (escaped, in a terminal and in HTML).

Spans are made by the real OpenTelemetry SDK and encoded by its real OTLP exporter's encoder, so the
decoder reads exactly what a function server sends; the JSON form is the same request in OTLP JSON.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from opd_nb.server.tracing.keys import TraceKeys
from opd_nb.server.tracing.otlp_decode import OtlpError, decode
from opd_nb.traces import ids
from opd_nb.traces.spans import trajectories
from opd_nb.traces.summary import StepTraces, metric_name, percentile

SAMPLE = {
    ids.SAMPLE_ID_KEY: "step 3-2",
    ids.ROLLOUT_ID_KEY: "1",
    ids.ATTEMPT_ID_KEY: "0",
}


def _export(
    tool_error: str | None = "boom", tool_args: str = '{"digits": "93418"}', llm_s: float = 0.002
) -> bytes:
    """One traced rollout call as a function server exports it: CHAIN > ROLLOUT > (LLM, TOOL)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    mem = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "opd ft-1 rollout r"}))
    provider.add_span_processor(SimpleSpanProcessor(mem))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span(
        "invoke_agentic_rl", attributes={**SAMPLE, "gen_ai.span.kind": "CHAIN"}
    ):
        with tracer.start_as_current_span(
            "invoke_rollout R", attributes={**SAMPLE, "gen_ai.span.kind": "ROLLOUT"}
        ):
            with tracer.start_as_current_span("chat student", attributes={
                **SAMPLE, "gen_ai.span.kind": "LLM", "gen_ai.usage.input_tokens": 10,
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "sort 93418"}]}]),
            }):  # fmt: skip
                time.sleep(llm_s)
            with tracer.start_as_current_span(
                "execute_tool count_digits",
                attributes={**SAMPLE, "gen_ai.span.kind": "TOOL", "gen_ai.tool.name": "count_digits",
                            "gen_ai.tool.call.arguments": tool_args},
            ) as tool:  # fmt: skip
                if tool_error:
                    tool.record_exception(ValueError(tool_error))
                    tool.set_status(Status(StatusCode.ERROR, tool_error))
    return encode_spans(mem.get_finished_spans()).SerializeToString()


def _as_otlp_json(body: bytes) -> bytes:
    """The same request in OTLP JSON (ids in hex, not protobuf JSON's base64)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    doc = json_format.MessageToDict(req)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64decode(s[key]).hex()
    return json.dumps(doc).encode()


def test_protobuf_and_json_exports_decode_to_the_same_linked_tree() -> None:
    body = _export(llm_s=0.15)
    spans = decode(body, "application/x-protobuf").spans
    assert decode(_as_otlp_json(body), "application/json; charset=utf-8").spans == spans
    assert {s.kind for s in spans} == {"CHAIN", "ROLLOUT", "LLM", "TOOL"}
    assert all(s.service == "opd ft-1 rollout r" and len(s.trace_id) == 32 for s in spans)
    [t] = trajectories(spans)
    assert t.sample == ids.SampleRef(kind="train", step=3, group=2, sample=1)
    assert [(d, n.span.name) for d, n in t.nodes()] == [
        (0, "invoke_agentic_rl"), (1, "invoke_rollout R"), (2, "chat student"), (2, "execute_tool count_digits"),
    ]  # fmt: skip
    tool = next(n.span for _, n in t.nodes() if n.span.kind == "TOOL")
    assert tool.failed and tool.status_message == "boom" and t.errors == 1
    assert tool.events[0].attributes["exception.type"] == "ValueError"
    llm = next(n for _, n in t.nodes() if n.span.kind == "LLM")
    assert llm.slow and not any(
        n.slow for _, n in t.nodes() if n is not llm
    )  # most of the trajectory, >= 100 ms
    fast = trajectories(decode(_export(), "application/x-protobuf").spans)[0]
    assert not any(n.slow for _, n in fast.nodes())  # a 2 ms call is never slow, whatever its share
    peers = [s for _ in range(3) for s in decode(_export(llm_s=0.01), "application/x-protobuf").spans]
    late = trajectories(peers + spans)  # beside three 10 ms LLM calls, the 150 ms one is slow
    assert [n.span.duration_ms >= 100 for t in late for _, n in t.nodes() if n.slow] == [True]


@pytest.mark.parametrize(
    ("body", "ctype", "words"),
    [
        (b"\xff\xff\xff\x0f", "application/x-protobuf", "not an OTLP trace export"),
        (b"{not json", "application/json", "not JSON"),
        (b"[1, 2]", "application/json", "resourceSpans"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            "application/json",
            "not hex",
        ),
        (b'{"resourceSpans": 5}', "application/json", "not an OTLP trace export"),
        (b"x", "text/plain", "not an OTLP/HTTP encoding"),
        (b"x", None, "not an OTLP/HTTP encoding"),
    ],
)
def test_a_body_that_is_no_trace_export_is_refused_in_words(
    body: bytes, ctype: str | None, words: str
) -> None:
    with pytest.raises(OtlpError, match=words):
        decode(body, ctype)


def test_spans_with_malformed_ids_are_left_out_and_counted() -> None:
    doc = json.loads(_as_otlp_json(_export()))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "00" * 8
    got = decode(json.dumps(doc).encode(), "application/json")
    assert got.rejected == 1 and len(got.spans) == 3


def test_the_job_token_names_its_job_and_nothing_else_passes() -> None:
    keys = TraceKeys()
    token = keys.token("ft-20260101-abc")
    assert keys.job_of(token) == "ft-20260101-abc"
    forged = "ft-other." + token.rpartition(".")[2]
    assert [keys.job_of(t) for t in (forged, "local", "", None, token + "x", TraceKeys().token("ft-1"))] == [
        None
    ] * 6


def test_sample_ids_round_trip_and_others_are_not_ours() -> None:
    assert ids.parse(ids.sample_id(ids.where("validation", 12), 3), "0") == ids.SampleRef(
        kind="validation", step=12, group=3, sample=0
    )
    assert ids.parse(ids.sample_id(ids.where("train", 4), 0), "2", "1").attempt == 1
    for sample, rollout in (
        ("val-3", "0"),
        ("step x-1", "0"),
        ("step 1-2", "-1"),
        ("step 1-2", "a"),
        (None, "0"),
    ):
        assert ids.parse(sample, rollout) is None


def test_step_numbers_per_tool_and_llm_calls_per_trajectory() -> None:
    acc = StepTraces()
    acc.add(decode(_export(), "application/x-protobuf").spans)
    acc.add(decode(_export(tool_error=None), "application/x-protobuf").spans)
    m = acc.metrics()
    assert m["trace/tool/error_rate"] == 0.5 and m["trace/tool/count_digits/error_rate"] == 0.5
    assert m["trace/llm/calls_per_trajectory"] == 1.0
    assert m["trace/tool/count_digits/latency_p95_s"] >= m["trace/tool/count_digits/latency_p50_s"] >= 0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 and percentile([5.0], 0.95) == 5.0
    assert metric_name("weird tool/../\x1b[31m") == "weird_tool_.._31m"


def test_user_text_in_spans_is_escaped_in_html_and_in_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from opd_nb.cli._output import print_result
    from opd_nb.notebook.trajectory_html import waterfall_html
    from opd_nb.traces.page import TracesPage

    evil = '<img src=x onerror="alert(1)">\x1b[2J\r'
    spans = decode(
        _export(tool_error=evil, tool_args=json.dumps({"d": evil})), "application/x-protobuf"
    ).spans
    page = TracesPage(job_id="ft-1", step=3, steps_by_kind={"train": [3]}, trajectories=trajectories(spans))
    html = waterfall_html(page.trajectories)
    assert "<img" not in html and "&lt;img src=x onerror=" in html
    print_result(page)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2J" in out and "ERROR" in out and "[TOOL]" in out


def test_step_files_keep_the_rollouts_retention_and_skip_a_torn_line(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from opd_nb.server.store.traces import TraceFiles, file_name

    monkeypatch.setenv("OPD_ROLLOUTS_KEEP_STEPS", "2")
    files = TraceFiles(tmp_path)
    spans = decode(_export(), "application/x-protobuf").spans
    files.add("ft-1", "validation", 2, spans)
    for step in range(1, 6):
        files.add("ft-1", "train", step, spans)
    assert files.steps("ft-1") == {"train": [2, 4, 5], "validation": [2]}  # newest 2, plus the evaluation's
    with open(files.dir("ft-1") / file_name("train", 5), "a") as fh:
        fh.write('{"trace_id": "ab')  # a server killed mid-append
    assert files.read("ft-1", "train", 5) == spans
    # a file past the step the job has reached (a resumed job's, to be run again) is not ranked: it
    # pushes out no step the job ran, and is left for the step's own run
    files.add("ft-2", "train", 9, spans)
    for step in range(1, 4):
        files.append("ft-2", "train", step, spans, ran_through=step)
    assert files.steps("ft-2")["train"] == [2, 3, 9]


def test_a_failing_tool_is_a_health_alert_and_the_trace_numbers_get_panels() -> None:
    from opd_nb.health.rules import health_alerts
    from opd_nb.plots.png import panel_names

    rows = [
        {"step": 1, "actor/distillation/loss": 1.0, "trace/tool/error_rate": 0.0, "trace/tool/latency_p95_s": 0.01},
        {"step": 2, "actor/distillation/loss": 0.9, "trace/tool/error_rate": 0.5, "trace/tool/lookup/error_rate": 0.5,
         "trace/tool/count_digits/error_rate": 0.0, "trace/llm/calls_per_trajectory": 1.5},
    ]  # fmt: skip
    [alert] = [a for a in health_alerts(rows, job_id="ft-1") if a.rule == "tool_failures"]
    assert "50%" in alert.message and "(lookup)" in alert.message and "step 2" in alert.message
    assert "opd traces ft-1 --step 2" in alert.fix
    assert health_alerts(rows[:1], job_id="ft-1") == []
    names = panel_names({"ft-1": rows})
    assert names[-3:] == [
        "trace/tool/latency_p95_s",
        "trace/tool/error_rate",
        "trace/llm/calls_per_trajectory",
    ]


def test_the_forwarder_delivers_exports_with_the_collectors_headers_and_never_shows_them() -> None:
    from otlp_receiver import OtlpReceiver

    from opd_nb.errors import OpdError
    from opd_nb.server.tracing.otlp_forward import Forwarder, forward_url, parse_headers

    assert forward_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/traces"
    assert forward_url("https://cloud.langfuse.com/api/public/otel/v1/traces").endswith("/otel/v1/traces")
    for bad in ("ftp://x", "127.0.0.1:4318", ""):
        with pytest.raises(OpdError, match="not an http"):
            forward_url(bad)
    assert parse_headers(["Authorization=Basic abc=", " x-team = t1 "]) == {
        "Authorization": "Basic abc=",
        "x-team": "t1",
    }
    for bad in (["novalue"], ["=v"], ["a=b\r\nx: y"]):
        with pytest.raises(OpdError, match="NAME=VALUE"):
            parse_headers(bad)
    receiver = OtlpReceiver()
    try:
        fwd = Forwarder(receiver.url, {"Authorization": "Bearer collector-secret"})
        body = _export()
        fwd.send(body, "application/x-protobuf")
        fwd.close()
        assert fwd.sent == 1 and len(receiver.spans) == 4
        assert receiver.headers[0]["authorization"] == "Bearer collector-secret"
        assert "collector-secret" not in repr(fwd)
        down = Forwarder("http://127.0.0.1:9", {})  # nobody listens: counted, never raised
        down.send(body, "application/x-protobuf")
        down.close()
        assert down.failed == 1 and down.sent == 0
    finally:
        receiver.close()


def test_otlp_header_needs_otlp_forward() -> None:
    from typer.testing import CliRunner

    from opd_nb.cli import app

    out = CliRunner().invoke(app, ["serve", "status", "--otlp-header", "a=b"])
    assert out.exit_code != 0 and "--otlp-header needs --otlp-forward" in str(out.exception)


def test_a_long_run_names_its_steps_as_ranges_and_its_waterfalls_scroll_inside_the_view() -> None:
    """A 192-step job's trace view said "step 58 of 0, 1, 2, ..., 192" and grew a cell ~9,700 px tall."""
    from opd_nb.notebook.trajectory_html import SCROLL_PX, view_html, waterfall_html
    from opd_nb.views.render import ranges

    assert ranges(range(193)) == "0–192" and ranges([9, 1, 4, 5, 6, 4]) == "1, 4–6, 9" and ranges([]) == ""
    spans = decode(_export(), "application/x-protobuf").spans
    trajs = trajectories(spans)
    state = {"job_id": "ft-1", "note": None, "step": 58, "steps": list(range(193)), "kind": None,
             "group": None, "sample": None, "metrics": {}, "total": 128}  # fmt: skip
    html = view_html(state, trajs)
    assert "step <b>58</b> of 0–192 (193 with spans)" in html and ", 1, 2, 3," not in html
    assert f"max-height:{SCROLL_PX}px;overflow:auto" in waterfall_html(trajs)
    assert f"{len(trajs)} of 128 trajector" in html
