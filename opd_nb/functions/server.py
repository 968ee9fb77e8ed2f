"""Run a user's reward/rollout function the way the cloud runs it: the SDK's own function server.

Bailian unpacks the uploaded zip and starts ``dashscope.finetune.reinforcement.component.server.server``
with ``FUNC_TYPE`` and ``PROCESSOR_CLASS`` set and ``PYTHONPATH=.``. We do the same in a subprocess,
with two local differences: uvicorn binds 127.0.0.1 (the SDK's ``__main__`` binds 0.0.0.0) and runs
one worker. The app, the parser and the processor loading are the SDK's, unchanged, so whatever
works here works for the same reason in the cloud, and a crash in user code never reaches us.
(The playground's servers add one route of their own beside the SDK's: see ``_add_clean_route``.)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from opd_nb import settings
from opd_nb.constants import LOCAL_HOST
from opd_nb.errors import OpdError
from opd_nb.functions.log_cap import keep_own_log_under
from opd_nb.wire import http_client

SDK_SERVER_APP = "dashscope.finetune.reinforcement.component.server.server:app"
FUNC_TYPES = ("reward", "rollout", "group_reward")
PARENT_ENV = (
    settings.FUNCTION_PARENT.name
)  # the pid that started a function server: it stops once that is gone


def startup_seconds() -> float:
    """How long a job waits for its function servers (:data:`opd_nb.settings.FUNCTION_STARTUP_S`). On a
    heavily loaded machine (many jobs, two cores) importing the SDK alone can pass the default, and the
    job then fails before its first step; the variable gives such a machine more time."""
    value = settings.FUNCTION_STARTUP_S.get()
    assert value is not None  # the setting has a default
    return value


PARENT_POLL_S = 0.5
CLEAN_ROUTE_ENV = settings.CLEAN_ROUTE.name  # "1": also serve CLEAN_PATH (the playground asks for it)
CLEAN_PATH = "/opd/clean"
TRAJECTORY_ENV = "ENABLE_TRAJECTORY"  # the SDK's switch for its spans (see opd_nb.server.tracing.env)
CLEANERS = ("strip_reasoning", "strip_thinking", "clean_answer", "clean_text", "clean")  # first one found


class CleanRequest(BaseModel):
    text: str


class CleanReply(BaseModel):
    """The reward module's own cleanup of an answer (None: the module has no cleaner, or it raised)."""

    cleaned: str | None = None
    error: str | None = None


def classpath_to_module(classpath: str) -> str:
    """``functions/reward/reward.py:Cls`` -> ``functions.reward.reward.Cls`` (as the SDK's start.sh does).

    A dotted path (``pkg.mod.Cls``) is returned unchanged.
    """
    classpath = classpath.strip()
    if ":" not in classpath:
        if "." not in classpath:
            raise OpdError(
                f"classpath {classpath!r} names no module",
                fix="write it as 'path/to/file.py:ClassName' or 'pkg.module.ClassName'",
            )
        return classpath
    filepath, _, classname = classpath.rpartition(":")
    if not filepath or not classname:
        raise OpdError(
            f"classpath {classpath!r} is incomplete", fix="write it as 'path/to/file.py:ClassName'"
        )
    if os.path.isabs(filepath):
        raise OpdError(
            f"classpath {classpath!r} is absolute", fix="make it relative to the function's zipdir"
        )
    module = os.path.normpath(filepath).replace(os.sep, "/")
    if module.endswith(".py"):
        module = module[: -len(".py")]
    module = module.lstrip("./").replace("/", ".")
    return f"{module}.{classname}"


def free_port(host: str = LOCAL_HOST) -> int:
    """A port the OS says is free right now on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _server_env(
    code_dir: Path, func_type: str, processor: str, port: int, env: dict[str, str] | None
) -> dict[str, str]:
    """The SDK server's environment (as the cloud's start.sh sets it), plus who started it (it watches that pid)."""
    child_env = {k: v for k, v in os.environ.items() if k not in ("FUNC_TYPE", "PROCESSOR_CLASS")}
    child_env.update(env or {})
    path = os.pathsep.join([str(code_dir), child_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    child_env.update(
        {
            "FUNC_TYPE": func_type,
            "PROCESSOR_CLASS": processor,
            "SERVER_PORT": str(port),
            "WORKERS_COUNT": "1",
            "PYTHONPATH": path,
            "PYTHONUNBUFFERED": "1",
            PARENT_ENV: str(os.getpid()),
        }
    )
    return child_env


class FunctionServer:
    """One user function served by the SDK's function server in a subprocess on loopback."""

    def __init__(self, process: subprocess.Popen, url: str, log_path: Path, func_type: str, processor: str):
        self.process = process
        self.url = url
        self.log_path = log_path
        self.func_type = func_type
        self.processor = processor
        self._launch: tuple[list[str], Path, dict[str, str]] | None = None  # (argv, cwd, env): to restart

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(
        cls,
        code_dir: str | Path,
        func_type: str,
        processor_class: str,
        *,
        port: int | None = None,
        log_path: str | Path | None = None,
        env: dict[str, str] | None = None,
        startup_timeout: float = 60.0,
    ) -> FunctionServer:
        """Start the server for `processor_class` found under `code_dir` and wait until it is healthy."""
        code_dir = Path(code_dir).resolve()
        if not code_dir.is_dir():
            raise OpdError(f"function directory {code_dir} does not exist")
        func_type = str(getattr(func_type, "value", func_type)).lower()
        if func_type not in FUNC_TYPES:
            raise OpdError(f"unknown function type {func_type!r}", fix=f"use one of {', '.join(FUNC_TYPES)}")
        processor = classpath_to_module(processor_class)
        port = port or free_port()
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"opd-fn-{func_type}-", suffix=".log")
            os.close(fd)
            log_path = name
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)

        child_env = _server_env(code_dir, func_type, processor, port, env)
        cmd = [sys.executable, "-m", "opd_nb.functions.server", SDK_SERVER_APP, "--host", LOCAL_HOST]
        cmd += [
            "--port",
            str(port),
            "--workers",
            "1",
            "--log-level",
            "info",
        ]  # uvicorn's, as _guarded_app reads them
        server = cls(_spawn(cmd, code_dir, child_env, log_path), f"http://{LOCAL_HOST}:{port}", log_path,
                     func_type, processor)  # fmt: skip
        server._launch = (cmd, code_dir, child_env)
        server._wait_healthy(startup_timeout)
        return server

    def restart(self, startup_timeout: float = 60.0) -> None:
        """Start the server again after it died, as it was started: same code, port and log (appended),
        so whoever calls :attr:`url` reaches the new process."""
        if self._launch is None:
            raise OpdError(f"the {self.func_type} function server for {self.processor} cannot be restarted")
        self.stop()
        cmd, code_dir, env = self._launch
        self.process = _spawn(cmd, code_dir, env, self.log_path)
        self._wait_healthy(startup_timeout)

    def _wait_healthy(self, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = "\n".join(self.log_lines(30))
                raise OpdError(
                    f"the {self.func_type} function server for {self.processor} exited "
                    f"(code {self.process.returncode}) before it became healthy:\n{tail}",
                    fix="fix the error above in your function code (try importing the module yourself)",
                )
            try:
                resp = http_client.get(f"{self.url}/health", timeout=2.0)
                if resp.status_code == 200 and resp.json().get("status") == "healthy":
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.1)
        tail = "\n".join(self.log_lines(30))
        self.stop()
        raise OpdError(
            f"the {self.func_type} function server for {self.processor} did not become healthy "
            f"within {timeout:.0f}s:\n{tail}"
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_lines(self, limit: int = 200) -> list[str]:
        """The last `limit` lines the server (and the user's code) wrote."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return [line.rstrip("\n") for line in deque(fh, maxlen=limit)]
        except OSError:
            return []

    def stop(self, timeout: float = 5.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)

    def __enter__(self) -> FunctionServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited({self.process.returncode})"
        return f"FunctionServer({self.func_type}, {self.processor}, {self.url}, {state})"


def _spawn(cmd: list[str], code_dir: Path, env: dict[str, str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            cmd, cwd=code_dir, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def _serve_watching_parent(argv: list[str]) -> None:
    """uvicorn with ``argv``, stopped (as by SIGTERM) once the process that started it is gone.

    A server, worker or kernel killed with SIGKILL would otherwise leave its function servers
    running, each holding a port, until someone reaps them; so they watch their parent, like a job's
    worker and a deployment do."""
    import threading

    import uvicorn

    keep_own_log_under()
    if os.environ.get(TRAJECTORY_ENV, "").strip().lower() in ("true", "1", "yes"):
        _no_http_spans()
        install_tracer_provider()
    if settings.CLEAN_ROUTE.pop():
        _add_clean_route()
    parent = settings.FUNCTION_PARENT.pop() or 0
    if parent:
        threading.Thread(
            target=_stop_when_orphaned, args=(parent,), name="opd-parent-watch", daemon=True
        ).start()
    app, host, port, log_level = _guarded_app(argv)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


def _guarded_app(argv: list[str]) -> tuple[Any, str, int, str]:
    """(app, host, port, log level) from the uvicorn arguments :meth:`FunctionServer.start` passes: the
    SDK's app, imported as uvicorn would, behind the Host/Origin check of :mod:`opd_nb.loopback` (a
    web page could otherwise call the user's function through DNS rebinding)."""
    import argparse
    import importlib

    from opd_nb.loopback import guard

    parser = argparse.ArgumentParser(prog="python -m opd_nb.functions.server")
    parser.add_argument("app", help="module:attribute, as uvicorn takes it")
    parser.add_argument("--host", default=LOCAL_HOST)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, choices=[1], default=1)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    module, _, attr = str(args.app).partition(":")
    app = getattr(importlib.import_module(module), attr or "app")
    return guard(app, args.host, args.port), args.host, args.port, args.log_level


def _no_http_spans() -> None:
    """Keep FastAPI (>= 0.165 traces every request natively once a tracer provider exists) from tracing
    the SDK app's requests: three spans per call (``POST /api/v1``, ``fastapi.endpoint``,
    ``fastapi.dependencies``) that belong to no rollout sample, so ``opd serve`` drops them, yet the
    server made, encoded and sent them on every call: 60% of a reward job's spans. The SDK's own
    spans (``invoke_agentic_rl`` and below) are untouched. FastAPI takes this setting only when the
    app is made (``FastAPI(telemetry=...)``), and the SDK makes it: so its config is changed in place."""
    import importlib

    app = importlib.import_module(SDK_SERVER_APP.partition(":")[0]).app
    config = getattr(app, "_telemetry", None)
    if isinstance(config, dict):  # an older FastAPI has no native telemetry: nothing to turn off
        config.update(tracing=False, operation_spans=False)


def install_tracer_provider() -> None:
    """Set the tracer provider the SDK would make, before it makes it, with tracers made once.

    The SDK (``ensure_agentic_rl_baggage_span_processor``, at the server's startup) uses a provider set
    from outside as it stands and adds its baggage processor to it; else it makes one: a resource with
    ``service.instance.id=worker-<pid>`` (plus ``OTEL_SERVICE_NAME``) and a ``BatchSpanProcessor`` over
    the OTLP/HTTP exporter to ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``. This is that provider, with one
    difference: the SDK asks for its tracer on every call (three times per reward call), and
    OpenTelemetry's ``get_tracer`` builds an instrumentation scope, a deprecated ``InstrumentationInfo``
    and a warnings filter each time, ~25 us per reward call (a tenth of what tracing costs one); here
    the tracer of a scope is made once. Without an endpoint, nothing is set (as the SDK does)."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        return
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.util.types import Attributes

    class OncePerScope(TracerProvider):
        _made: ClassVar[dict[tuple[str, str | None, str | None], trace.Tracer]] = {}

        def get_tracer(
            self,
            instrumenting_module_name: str,
            instrumenting_library_version: str | None = None,
            schema_url: str | None = None,
            attributes: Attributes = None,
        ) -> trace.Tracer:
            if attributes:  # not hashable: made each time, as before
                return super().get_tracer(
                    instrumenting_module_name, instrumenting_library_version, schema_url, attributes
                )
            key = (instrumenting_module_name, instrumenting_library_version, schema_url)
            tracer = self._made.get(key)
            if tracer is None:
                tracer = self._made[key] = super().get_tracer(*key)
            return tracer

    provider = OncePerScope(resource=Resource.create({"service.instance.id": f"worker-{os.getpid()}"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)


def _add_clean_route() -> None:
    """Serve ``POST CLEAN_PATH``: the answer as the reward module's own cleaner (``strip_reasoning``
    in the template) sees it, for the playground's "cleaned text". A local addition beside the SDK's
    routes, which stay as they are; it imports the SDK's app first, exactly as uvicorn would."""
    import importlib

    sdk = importlib.import_module(SDK_SERVER_APP.partition(":")[0])
    module = sys.modules.get(os.environ.get("PROCESSOR_CLASS", "").rpartition(".")[0])
    cleaner = next((getattr(module, n) for n in CLEANERS if callable(getattr(module, n, None))), None)

    def clean(request: CleanRequest) -> CleanReply:
        if cleaner is None:
            return CleanReply()
        try:
            return CleanReply(cleaned=str(cleaner(request.text)))
        except Exception as exc:  # the user's cleaner; its error is shown, not raised
            return CleanReply(error=f"{type(exc).__name__}: {exc}")

    sdk.app.post(CLEAN_PATH)(clean)


def _stop_when_orphaned(parent: int) -> None:
    import signal

    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful stop
    time.sleep(5.0)
    os._exit(1)  # it did not stop in time


if __name__ == "__main__":
    _serve_watching_parent(sys.argv[1:])
