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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_PROVIDER = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {tests!r})
    from otlp_receiver import OtlpReceiver
    from opd_nb.server.trace_env import ENDPOINT_ENV, TOKEN_ENV, function_env

    receiver = OtlpReceiver()
    os.environ.update(function_env({{ENDPOINT_ENV: receiver.url + "/v1/traces", TOKEN_ENV: "t"}}, "opd ft-1 reward r"))
    from opd_nb.function_server import install_tracer_provider

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
