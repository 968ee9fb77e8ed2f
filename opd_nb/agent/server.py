"""`opd mcp`: the tools, resources and instructions on the official SDK's ``MCPServer``, over stdio or
streamable HTTP on loopback (a non-loopback bind needs a strong server key, as `opd serve`).

The server logs at WARNING (the SDK logs each failing tool's message at INFO): no argument, result
or key reaches a log, and stdout belongs to the protocol (the SDK diverts the process's own).
"""

from __future__ import annotations

import hmac
from typing import Any

NAME = "opd-nb"
INSTRUCTIONS = (
    "opd-nb runs online policy distillation (OPD) jobs on Alibaba Cloud Bailian (target cloud, paid) or on a "
    "local `opd serve` (target local, free). Workflow: new_workspace, check, estimate, smoke, submit, "
    "wait_job (with guard), metrics/alerts/samples to diagnose, checkpoints, export_checkpoint, deploy, "
    "evaluate. A paid action (cloud submit, smoke, sweep, continued training, deploy, cloud evaluate) is two "
    "calls: the first sends nothing and returns a confirmation with a token; show the user its summary, "
    "warnings and estimate, and only on their yes call again with confirmation_token. Never invent a token."
)


def build() -> Any:
    """The MCPServer with every tool and resource registered (imports the `mcp` SDK)."""
    from mcp.server.mcpserver import MCPServer

    from opd_nb._version import __version__
    from opd_nb.agent import resources, tools_jobs, tools_read, tools_work

    app = MCPServer(NAME, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    for tool in (*tools_work.TOOLS, *tools_jobs.TOOLS, *tools_read.TOOLS):
        app.add_tool(tool)
    resources.register(app)
    return app


def run_stdio() -> None:
    build().run("stdio")


class KeyCheck:
    """ASGI middleware: with a server key, every request must carry ``Authorization: Bearer <key>``."""

    def __init__(self, app: Any, key: str):
        self.app, self._key = app, key.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            auth = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
            scheme, _, token = auth.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self._key):
                from starlette.responses import JSONResponse

                reply = JSONResponse({"error": "missing or wrong server key: send 'Authorization: Bearer <key>'"},
                                     status_code=401)  # fmt: skip
                await reply(scope, receive, send)
                return
        await self.app(scope, receive, send)


def http_app(host: str, api_key: str | None) -> Any:
    """The streamable-HTTP app at ``/mcp``; behind the key check when a server key is set."""
    from opd_nb.errors import OpdError
    from opd_nb.server.runner import refuse_open_bind

    refusal = refuse_open_bind(host, api_key)
    if refusal:
        raise OpdError(refusal.removeprefix("error: "), exit_code=2)
    app = build().streamable_http_app(host=host)
    return KeyCheck(app, api_key) if api_key else app


def run_http(host: str, port: int, api_key: str | None) -> None:
    import uvicorn

    uvicorn.run(http_app(host, api_key), host=host, port=port, log_level="warning")
