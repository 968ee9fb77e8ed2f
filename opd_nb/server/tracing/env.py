"""How a job's function servers are started with the SDK's tracing on, exporting to this control plane.

The SDK (``observability/tracing.py``) traces when ``ENABLE_TRAJECTORY=true`` and exports over OTLP/HTTP
to ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` through a ``BatchSpanProcessor`` (a background thread: the
rollout never waits on the export). The job manager hands each worker the endpoint and the job's
token (:data:`ENDPOINT_ENV`, :data:`TOKEN_ENV`); the worker gives its function servers the standard
OpenTelemetry variables below. Without the tracing packages (``opd-nb[tracing]``) nothing is set and
the job says so in its log. Light: no OpenTelemetry import.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from urllib.parse import quote

from opd_nb import settings
from opd_nb.functions.server import TRAJECTORY_ENV

OTLP_PREFIX = "/otlp/"  # checked by the job's token, not by the API key (auth.py)
OTLP_PATH = OTLP_PREFIX + "v1/traces"  # the route (OTLP/HTTP's own path, under a prefix that says what it is)
TRACING_ENV = settings.TRACING.name  # "0": function servers start without tracing (bench/tracing_overhead.py)
ENDPOINT_ENV = settings.OTLP_ENDPOINT.name  # worker env: where its function servers export
TOKEN_ENV = settings.OTLP_TOKEN.name  # worker env: their credential (see tracing.keys)
SCHEDULE_DELAY_MS = 500  # how often a function server sends what it traced (the SDK's default is 5 s)
EXPORT_BATCH = (
    64  # spans per request: an LLM span holds up to 2 x 128 KB of messages; this stays under 16 MiB
)
# What the SDK needs to export spans, and what its LLM and tool spans need (module -> package).
NEEDED = {
    "opentelemetry.sdk.trace": "opentelemetry-sdk",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter": "opentelemetry-exporter-otlp-proto-http",
    "opentelemetry.processor.baggage": "opentelemetry-processor-baggage",
    "opentelemetry.util.genai.extended_handler": "loongsuite-util-genai",
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2": "opentelemetry-proto",
}


def missing_packages() -> list[str]:
    """The tracing packages this environment lacks (install ``opd-nb[tracing]``)."""
    out: list[str] = []
    for module, package in NEEDED.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(package)
    return out


def function_env(worker_env: Mapping[str, str], service: str) -> dict[str, str]:
    """The variables that turn the SDK's tracing on in a function server (empty: tracing is off).

    `service`: the spans' ``service.name`` (a forwarded span says which job and function sent it). The
    user's own OTEL settings for content capture win; the endpoint and credential are always ours."""
    endpoint, token = settings.OTLP_ENDPOINT.raw(worker_env) or "", settings.OTLP_TOKEN.raw(worker_env) or ""
    if not endpoint or not token:
        return {}
    env = {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",  # LLM spans carry their messages
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
        "OTEL_BSP_SCHEDULE_DELAY": str(SCHEDULE_DELAY_MS),
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": str(EXPORT_BATCH),
    }
    env = {k: worker_env.get(k) or v for k, v in env.items()}
    env.update(
        {
            TRAJECTORY_ENV: "true",
            "AGENTIC_RL_FORCE_FLUSH_MODE": "shutdown",  # what a stopping server traced is still sent
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Authorization=" + quote(f"Bearer {token}"),
            "OTEL_SERVICE_NAME": service,
        }
    )
    return env
