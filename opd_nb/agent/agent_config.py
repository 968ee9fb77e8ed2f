"""`opd mcp config --for AGENT`: the entry each coding agent reads to start `opd mcp`, printed or written.

Project scope, where each agent looks for a project's servers: Claude Code ``.mcp.json``, Cursor
``.cursor/mcp.json``, Qwen Code ``.qwen/settings.json`` (all ``mcpServers``), Codex
``.codex/config.toml`` (``[mcp_servers.opd-nb]``). The command is this interpreter running
``-m opd_nb mcp``, so it works whether or not the venv is on the agent's PATH. No key is written: the
server reads it from the environment or the workspace's ``.env``, as `opd` does. Writing merges into
an existing file, replacing only our own entry.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from pydantic import BaseModel

from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin

SERVER_NAME = "opd-nb"
AGENTS = {
    "claude-code": ".mcp.json",
    "cursor": ".cursor/mcp.json",
    "qwen-code": ".qwen/settings.json",
    "codex": ".codex/config.toml",
}


class AgentConfig(ResultMixin, BaseModel):
    agent: str
    path: str  # where the agent reads it (relative to the project; absolute once written)
    text: str  # the whole file as it is (or would be) with our entry
    written: bool = False

    def __str__(self) -> str:
        head = (
            f"wrote {self.path}"
            if self.written
            else f"# {self.agent}: put this in {self.path} (or pass --write)"
        )
        return f"{head}\n{self.text}"


def server_command(plane: list[str]) -> tuple[str, list[str]]:
    return sys.executable, ["-m", "opd_nb", "mcp", *plane]


def _json_file(existing: str, command: str, args: list[str]) -> str:
    try:
        data = json.loads(existing) if existing.strip() else {}
    except ValueError as exc:
        raise OpdError(
            f"the existing file is not JSON ({exc})", fix="fix or move it, then run again"
        ) from None
    if not isinstance(data, dict):
        raise OpdError("the existing file holds no JSON object", fix="fix or move it, then run again")
    servers = data.setdefault("mcpServers", {})
    servers[SERVER_NAME] = {"command": command, "args": args}
    return json.dumps(data, indent=2) + "\n"


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


def _toml_file(existing: str, command: str, args: list[str]) -> str:
    header = f"[mcp_servers.{SERVER_NAME}]"
    ours = re.compile(rf"^\[mcp_servers\.{re.escape(SERVER_NAME)}(\.[^\]]*)?\]\s*$")
    kept, skipping = [], False
    for line in existing.splitlines():
        if line.startswith("["):
            skipping = bool(ours.match(line))
        if not skipping:
            kept.append(line)
    block = [
        header,
        f"command = {_toml_string(command)}",
        f"args = [{', '.join(_toml_string(a) for a in args)}]",
    ]
    body = "\n".join(kept).rstrip()
    return (body + "\n\n" if body else "") + "\n".join(block) + "\n"


def agent_config(
    agent: str, plane: list[str], project: Path | None = None, *, write: bool = False
) -> AgentConfig:
    """The config `agent` expects for `opd mcp` (with `plane`: --local URL / --cloud), merged into the
    project's existing file; written there when `write`."""
    if agent not in AGENTS:
        raise OpdError(f"unknown agent {agent!r}", where="--for", fix=f"use one of {', '.join(AGENTS)}")
    root = (project or Path.cwd()).resolve()
    path = root / AGENTS[agent]
    existing = path.read_text(encoding="utf-8") if path.is_file() else ""
    command, args = server_command(plane)
    make = _toml_file if path.suffix == ".toml" else _json_file
    text = make(existing, command, args)
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return AgentConfig(agent=agent, path=str(path if write else AGENTS[agent]), text=text, written=write)
