"""What tracing costs, kept down: a traced function server makes each tracer once (the SDK asks for its
tracer on every call), the OTLP intake never reads back a step it has only just begun, and the helpers
of ``bench/tracing_overhead.py`` (per-process CPU over a job's steps) measure what they say.

The provider test runs in a fresh interpreter (a process has one global tracer provider), with the real
OpenTelemetry SDK, the real dashscope SDK's tracing module and a loopback OTLP receiver.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_traces import _export

from opd_nb.server.app import create_app
from opd_nb.server.records import ServeOptions
from opd_nb.server.store.job_record import JobMeta
from opd_nb.server.store.traces import TraceFiles
from opd_nb.wire.jobs import JobProgress

REPO = Path(__file__).resolve().parents[1]
PB = "application/x-protobuf"

_PROVIDER = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {tests!r})
    from otlp_receiver import OtlpReceiver
    from opd_nb.server.tracing.env import ENDPOINT_ENV, TOKEN_ENV, function_env

    receiver = OtlpReceiver()
    os.environ.update(function_env({{ENDPOINT_ENV: receiver.url + "/v1/traces", TOKEN_ENV: "t"}}, "opd ft-1 reward r"))
    from opd_nb.functions.server import install_tracer_provider

    install_tracer_provider()
    from opentelemetry import trace
    from dashscope.finetune.reinforcement.component.observability import tracing as sdk

    sdk.ensure_agentic_rl_baggage_span_processor()  # what the SDK's server does at its start
    provider = trace.get_tracer_provider()
    with sdk.rollout_context(rollout_id="1", sample_id="step 3-2", attempt_id="0"):
        with sdk.get_tracer().start_as_current_span("invoke_agentic_rl"):
            pass
    provider.force_flush()
    [span] = receiver.spans
    print(json.dumps({{
        "same_tracer": sdk.get_tracer() is sdk.get_tracer(),
        "processors": [type(p).__name__ for p in provider._active_span_processor._span_processors],
        "resource": dict(provider.resource.attributes),
        "pid": os.getpid(),
        "span_attributes": {{kv.key: kv.value.string_value for kv in span.attributes}},
    }}))
    receiver.close()
    """
)


@pytest.mark.slow
def test_a_traced_function_servers_provider_makes_each_tracer_once_and_keeps_the_sdks_setup() -> None:
    code = _PROVIDER.format(tests=str(REPO / "tests"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["same_tracer"] is True  # the SDK's get_tracer() per call no longer builds a scope each time
    # the SDK's own setup on it: its batch export, then its baggage processor (added to a provider set outside)
    assert got["processors"] == ["BatchSpanProcessor", "BaggageSpanProcessor"]
    assert got["resource"]["service.instance.id"] == f"worker-{got['pid']}"
    assert got["resource"]["service.name"] == "opd ft-1 reward r"
    assert got["span_attributes"]["bailian.agentic_rl.sample_id"] == "step 3-2"  # baggage -> every span


def _intake(tmp_path: Path):  # noqa: ANN202
    app = create_app(ServeOptions(data_dir=str(tmp_path)))
    services = app.state.services
    meta = JobMeta(training_type="pg_opd", student_path="/s", teacher_path="/t", train_file="/f.jsonl")
    services.store.insert_job("ft-1", "traced", {"model": "m"}, meta)
    # running its step 3 of 10: a span may name steps 0..3 (tracing.intake.last_step)
    services.store.set_job("ft-1", status="RUNNING", progress=JobProgress(step=2, total_steps=10))
    return services, services.traces.keys.token("ft-1")


def test_the_intake_never_reads_back_a_step_it_has_only_just_begun(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A step's first export is all its file holds: its numbers come from the spans in hand. Only a
    step that left memory (a restart, or more steps at once than are kept) is read back from its file."""
    reads: list[int] = []
    read = TraceFiles.spans
    monkeypatch.setattr(
        TraceFiles, "spans", lambda self, job, kind, step: reads.append(step) or read(self, job, kind, step)
    )
    services, token = _intake(tmp_path)
    body = _export()  # one traced rollout of train step 3 with a failing tool call
    for _ in range(2):
        services.traces.accept(token, body, PB)
    assert reads == []
    [row] = services.store.metrics("ft-1")
    assert row["trace/tool/error_rate"] == 1.0 and row["trace/llm/calls_per_trajectory"] == 2.0

    services.traces._steps.clear()  # as after a restart: the step's numbers are rebuilt from its file
    services.traces.accept(token, body, PB)
    assert reads == [3]
    [row] = services.store.metrics("ft-1")
    assert row["trace/llm/calls_per_trajectory"] == 3.0  # all three exports' LLM spans, none counted twice
    assert len(services.traces.files.read("ft-1", "train", 3)) == 3 * 4


# ---- the bench's helpers ------------------------------------------------------------------------------
sys.path.insert(0, str(REPO / "bench"))


@pytest.mark.slow
def test_the_bench_reads_each_roles_cpu_over_the_steps_window() -> None:
    import tracing_overhead as bench

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    code = f"import subprocess, sys, time\ntime.sleep(0.3)\nsubprocess.run([sys.executable, '-c', '# worker\\n' + {burn!r}])\ntime.sleep(0.3)\n"
    root = subprocess.Popen([sys.executable, "-c", code])
    sampler = bench.CpuSampler(root.pid)
    sampler.start()
    t0 = time.time()
    root.wait(30)
    t1 = time.time()
    sampler.stop()
    before, after = sampler.at(t0), sampler.at(t1)
    assert 0.25 <= after["worker"] - before.get("worker", 0.0) <= 0.6  # the child's 0.3 s, by its role
    assert after["serve"] < 0.5  # the parent only slept
    mid = sampler.at((t0 + t1) / 2)
    assert before.get("worker", 0.0) <= mid.get("worker", 0.0) <= after["worker"]


def test_the_bench_times_the_steps_by_their_log_lines_and_leaves_the_evaluating_last_one_out(
    tmp_path: Path,
) -> None:
    import tracing_overhead as bench

    from opd_nb.constants import LOSS, STEP_SECONDS, VALID_TOKEN_RATE
    from opd_nb.engine.trainer import _step_line
    from opd_nb.server.store import Store
    from opd_nb.server.worker import StoreEvents

    store = Store(tmp_path)
    events = StoreEvents(store, "ft-1")
    row = {"step": 0, LOSS: 0.5, VALID_TOKEN_RATE: 1.0, STEP_SECONDS: 0.04}
    for step in (1, 2, 4, 6, 8):
        events.log(_step_line({**row, "step": step}, 8, 1, 1, 1.0))
        events.log("a line that is no step's")
    ends = bench.step_times(tmp_path, "ft-1")
    assert sorted(ends) == [1, 2, 4, 6, 8]

    class Flat:  # a process tree that used 1 ms of CPU per ms of wall time, all of it the worker's
        def at(self, t: float) -> dict[str, float]:
            return {"worker": t}

    rows = [{**row, "step": s, STEP_SECONDS: 0.01 * s, "timing_s/teacher": 0.001} for s in range(1, 9)]
    job = bench.job_figures("on", rows, ends, Flat())  # type: ignore[arg-type]
    # the first logged step after the warm-up; the last one before the final (evaluating) step
    first, last = 4, 6
    assert job.window_ms == pytest.approx(1000 * (ends[last] - ends[first]) / (last - first))
    assert job.cpu["worker"] == pytest.approx(job.window_ms)
    assert job.step_ms == pytest.approx(1000 * 0.01 * 6)  # median of steps 4..8
    assert job.stages["teacher"] == pytest.approx(1.0)
