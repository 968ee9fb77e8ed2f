"""`opd mcp`: the tools, resources and instructions on the official SDK's ``MCPServer``, over stdio or
streamable HTTP on loopback (a non-loopback bind needs a strong server key, as `opd serve`).

The server logs at WARNING (the SDK logs each failing tool's message at INFO): no argument, result
or key reaches a log, and stdout belongs to the protocol (the SDK diverts the process's own).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from opd_nb.loopback import bearer_token, binds_loopback_only, guard, same_key

NAME = "opd-nb"
INSTRUCTIONS = (
    "opd-nb runs online policy distillation (OPD) jobs on Alibaba Cloud Bailian (target cloud, paid) or on a "
    "local `opd serve` (target local, free). Workflow: new_workspace, check, estimate, probe, smoke, submit, "
    "wait_job (with guard), metrics/alerts/samples to diagnose, checkpoints, export_checkpoint, deploy, "
    "evaluate. A paid action (cloud submit, smoke, sweep, continued training, deploy, cloud evaluate or probe) is two "
    "calls: the first sends nothing and returns a confirmation with a token; show the user its summary, "
    "warnings and estimate, and only on their yes call again with confirmation_token. Never invent a token."
)


def _server_class() -> Any:
    """The SDK's MCPServer with our failure rules (:mod:`opd_nb.agent.failures`) and compact results: a
    tool's text content is its structured content as compact JSON (the data once, not indented again)."""
    import json

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import (
        ResourceError,
        ToolError,
        UnexpectedResourceError,
        UnexpectedToolError,
    )
    from mcp.types import CallToolResult, TextContent
    from pydantic import ValidationError

    from opd_nb.agent.failures import cap, crash_line, validation_line

    class OpdServer(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            shown = cap(name, 80)
            if self._tool_manager.get_tool(name) is None:
                raise ToolError(f"no tool {shown!r} (fix: call one that tools/list names)")
            try:
                result = await super().call_tool(name, arguments, context)
            except UnexpectedToolError as exc:
                raise ToolError(crash_line(shown, exc)) from None
            except ToolError as exc:
                if isinstance(exc.__cause__, ValidationError):
                    raise ToolError(validation_line(shown, exc.__cause__)) from None
                raise ToolError(
                    cap(str(exc).replace(f"Error executing tool {name}: ", f"{shown}: "))
                ) from None
            if (
                isinstance(result, CallToolResult)
                and result.structured_content is not None
                and not result.is_error
            ):
                text = json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False)
                result.content = [TextContent(type="text", text=text)]
            return result

        async def read_resource(self, uri: Any, context: Any = None) -> Any:
            try:
                return await super().read_resource(uri, context)
            except UnexpectedResourceError as exc:
                raise ResourceError(crash_line(cap(str(uri), 120), exc)) from None
            except ResourceError as exc:
                raise type(exc)(cap(str(exc))) from None

    return OpdServer


def build() -> Any:
    """The MCPServer with every tool and resource registered (imports the `mcp` SDK)."""
    from opd_nb._version import __version__
    from opd_nb.agent import resources, tools_jobs, tools_plane, tools_read, tools_work
    from opd_nb.agent.annotations import annotations_for

    app = _server_class()(NAME, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    # The SDK's INFO lines quote a failing resource's URI (a job id an agent sent): at WARNING, never written.
    logging.getLogger("mcp").setLevel(logging.WARNING)
    for tool in (*tools_work.TOOLS, *tools_jobs.TOOLS, *tools_read.TOOLS, *tools_plane.TOOLS):
        app.add_tool(tool, annotations=annotations_for(tool.__name__))
    resources.register(app)
    return app


def run_stdio() -> None:
    build().run("stdio")


class KeyCheck:
    """ASGI middleware: with a server key, every request must carry ``Authorization: Bearer <key>``, compared
    as `opd serve` compares it (:func:`opd_nb.loopback.same_key`: a tab beside the key is another key)."""

    def __init__(self, app: Any, key: str):
        self.app, self._key = app, key

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            auth = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
            if not same_key(bearer_token(auth), self._key):
                from starlette.responses import JSONResponse

                reply = JSONResponse({"error": "missing or wrong server key: send 'Authorization: Bearer <key>'"},
                                     status_code=401)  # fmt: skip
                await reply(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _refuse_open_bind(host: str, api_key: str | None) -> None:
    from opd_nb.errors import OpdError
    from opd_nb.server.runner import refuse_open_bind

    refusal = refuse_open_bind(host, api_key)
    if refusal:
        raise OpdError(refusal.removeprefix("error: "), exit_code=2)


def http_app(host: str, api_key: str | None, port: int | None = None) -> Any:
    """The streamable-HTTP app at ``/mcp``: behind the key check when a server key is set, and behind the
    Host/Origin check (:func:`opd_nb.loopback.guard`) when bound to loopback, keyless or not, in place of
    the SDK's own, which checks only 127.0.0.1, localhost and ::1 (not 127.0.0.2, the rest of 127/8)."""
    _refuse_open_bind(host, api_key)
    security = None
    if binds_loopback_only(host):  # ours below is the one check: the SDK's own refuses `LOCALHOST.`
        from mcp.server.transport_security import TransportSecuritySettings

        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = build().streamable_http_app(host=host, transport_security=security)
    return guard(KeyCheck(app, api_key) if api_key else app, host, port)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that the Host check knows the real port (``--port 0``)."""
    from opd_nb.errors import OpdError

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise OpdError(f"cannot listen on {host}:{port}: {exc.strerror}", fix="pick another --port") from None
    sock.listen(2048)
    return sock


def run_http(host: str, port: int, api_key: str | None) -> None:
    import uvicorn

    _refuse_open_bind(host, api_key)  # before anything is bound
    sock = _listen(host, port)
    app = http_app(host, api_key, sock.getsockname()[1])
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
