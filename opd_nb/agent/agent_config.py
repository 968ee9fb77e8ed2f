"""`opd mcp config --for AGENT`: the entry each coding agent reads to start `opd mcp`, printed or written.

Project scope, where each agent looks for a project's servers: Claude Code ``.mcp.json``, Cursor
``.cursor/mcp.json``, Qwen Code ``.qwen/settings.json`` (all ``mcpServers``), Codex
``.codex/config.toml`` (``[mcp_servers.opd-nb]``). The command is this interpreter running
``-m opd_nb mcp``, so it works whether or not the venv is on the agent's PATH. No key is written: the
server reads it from the environment or the workspace's ``.env``, as `opd` does. Printed, it is exactly
the file (hints go to stderr); written, it merges into an existing file: only our entry's command and args
change, everything else stays as written; a file of another shape is refused and left untouched.
"""

from __future__ import annotations

import json
import sys
import tomllib
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
        """Printed: exactly the file, so `> .mcp.json` writes a valid one; written: where."""
        return f"wrote {self.path}" if self.written else self.text.rstrip("\n")

    def hint(self) -> str:
        """The line a person reads beside the printed file (on stderr, never in it)."""
        return "" if self.written else f"{self.agent}: put this in {self.path} (or pass --write)"


def server_command(plane: list[str]) -> tuple[str, list[str]]:
    return sys.executable, ["-m", "opd_nb", "mcp", *plane]


def _kind(value: object) -> str:
    """A value's kind as TOML and JSON both name it (tomlkit's own classes say String, Array, ...)."""
    for types, name in ((bool, "a boolean"), (str, "a string"), (int | float, "a number"), (list, "an array"),
                        (dict, "a table"), (type(None), "null")):  # fmt: skip
        if isinstance(value, types):
            return name
    return type(value).__name__


def _refuse(path: str, what: str, fix: str = "fix or move it, then run again") -> OpdError:
    return OpdError(f"{what}; nothing was written", where=path, fix=fix)


def _json_file(existing: str, command: str, args: list[str], path: str) -> str:
    """`existing` with ``mcpServers.opd-nb`` set; every other key kept. A file of another shape is refused."""
    try:
        data = json.loads(existing) if existing.strip() else {}
    except ValueError as exc:
        raise _refuse(path, f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _refuse(path, f"holds {_kind(data)}, not a JSON object")
    servers = data.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise _refuse(path, f"its mcpServers is {_kind(servers)}, not an object of servers",
                      fix='make it an object ({"mcpServers": {}}), then run again')  # fmt: skip
    entry = servers.get(SERVER_NAME)
    kept = {k: v for k, v in entry.items() if k not in ("command", "args")} if isinstance(entry, dict) else {}
    servers[SERVER_NAME] = {"command": command, "args": args, **kept}  # an env or cwd the user added stays
    return json.dumps(data, indent=2) + "\n"


def _toml_file(existing: str, command: str, args: list[str], path: str) -> str:
    """`existing` with ``[mcp_servers.opd-nb]``'s command and args set, by a TOML library that keeps the
    rest as it was written: comments, other servers, our entry's own ``env`` (a table, dotted keys or an
    inline table). A file that is not TOML, or whose ``mcp_servers`` is not a table, is refused."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        doc = tomlkit.parse(existing)
    except TOMLKitError as exc:
        raise _refuse(path, f"not TOML ({exc})") from None
    servers = doc.get("mcp_servers")
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        doc["mcp_servers"] = servers
    if not isinstance(servers, dict):
        raise _refuse(path, f"its mcp_servers is {_kind(servers)}, not a table of servers",
                      fix="make it a table ([mcp_servers.NAME] sections), then run again")  # fmt: skip
    entry = servers.get(SERVER_NAME)
    if entry is None:
        entry = tomlkit.table()
        servers[SERVER_NAME] = entry
    if not isinstance(entry, dict):
        raise _refuse(path, f"its mcp_servers.{SERVER_NAME} is {_kind(entry)}, not a table")
    entry["command"] = command
    entry["args"] = args
    text = tomlkit.dumps(doc)
    try:
        tomllib.loads(text)  # what Codex will read: never write a file it cannot
    except tomllib.TOMLDecodeError as exc:
        raise _refuse(path, f"its layout cannot take our entry ({exc})") from None
    return text if text.endswith("\n") else text + "\n"


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
    text = make(existing, command, args, str(path))
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return AgentConfig(agent=agent, path=str(path if write else AGENTS[agent]), text=text, written=write)
