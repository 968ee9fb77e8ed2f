"""Each tool's behaviour hints (MCP ``ToolAnnotations``), declared once here by what the tool does: hosts
read them to decide what to confirm. A tool without an entry fails `opd mcp` at start (and its test).

The four hints are always set. ``openWorldHint`` is true for a tool that may reach Bailian (it takes a
``target``) or another service; a paid start is never idempotent (each confirmed start costs money;
the confirmation token is what makes a repeat safe); a stop or cancel is destructive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from mcp.types import ToolAnnotations


class Effect(NamedTuple):
    """What one kind of tool does, as the four hints."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool

    def hints(self) -> ToolAnnotations:
        from mcp.types import ToolAnnotations  # the `mcp` extra: imported when `opd mcp` builds its server

        return ToolAnnotations(
            read_only_hint=self.read_only,
            destructive_hint=self.destructive,
            idempotent_hint=self.idempotent,
            open_world_hint=self.open_world,
        )


READ = Effect(True, False, True, True)  # reads a plane (local or Bailian)
READ_HERE = Effect(True, False, True, False)  # reads this machine only (a workspace, the plane's record)
WRITE_HERE = Effect(False, False, False, False)  # creates files here (a new workspace)
START_HERE = Effect(False, False, True, False)  # starts the local plane (a second call reuses it)
STOP_HERE = Effect(False, True, True, False)  # stops the local plane
CREATE = Effect(False, False, False, True)  # creates something on a plane or a service (an export, a report)
PAID_START = Effect(False, False, False, True)  # starts what Bailian bills: two calls, a token
BILLED_CALL = Effect(False, False, False, True)  # each call billed on Bailian (chat)
STOP = Effect(False, True, True, True)  # cancels or undeploys on a plane


EFFECTS: dict[str, Effect] = {
    "new_workspace": WRITE_HERE,
    "check": READ,  # reads the plane it checks against
    "estimate": READ_HERE,
    "export_checkpoint": CREATE,
    "deploy": PAID_START,
    "undeploy": STOP,
    "chat": BILLED_CALL,
    "evaluate": PAID_START,
    "probe": PAID_START,  # N x K x 2 chat calls, billed per token on Bailian
    "report": CREATE,
    "submit": PAID_START,
    "smoke": PAID_START,
    "sweep": PAID_START,
    "list_jobs": READ,
    "job_status": READ,
    "wait_job": STOP,  # with guard=true it cancels a job an error rule fires on
    "cancel_job": STOP,
    "metrics": READ,
    "alerts": READ,
    "logs": READ,
    "samples": READ,
    "checkpoints": READ,
    "compare": READ,
    "serve_start": START_HERE,
    "serve_stop": STOP_HERE,
    "serve_status": READ_HERE,
    "list_deployments": READ,
    "metric_series": READ,
}


def annotations_for(tool: str) -> ToolAnnotations:
    """The tool's hints; a tool nobody declared is a programming error, caught when the server is built."""
    if tool not in EFFECTS:
        raise LookupError(f"tool {tool!r} has no entry in opd_nb.agent.annotations.EFFECTS")
    return EFFECTS[tool].hints()
