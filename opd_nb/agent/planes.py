"""The two control planes as the tools see them: the same target rules as `opd --local/--cloud`, and the
server's state (the consent book, one guard and one alert tracker per watched job).

Every tool that reaches a plane takes ``target`` (local: an `opd serve`; cloud: Bailian) and ``base_url``
(left out: the plane `opd mcp` was started for, by :func:`client_for`'s one resolver); the key comes
from the environment or the workspace's ``.env``, as for `opd`, and never appears in an argument, a
result or a log line. Every string argument is typed here with its cap and no NUL (a path, an id, free
text), so the input schema says it and a bad value is refused before the tool runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

from pydantic import AfterValidator, Field

from opd_nb.agent.consent import ConsentBook
from opd_nb.constants import DEFAULT_LOCAL_API
from opd_nb.errors import OpdError

MAX_PATH_CHARS = 4096  # PATH_MAX on Linux: a longer path cannot be opened anywhere
MAX_ID_CHARS = 256  # far above any job, checkpoint or deployment id either plane issues


def no_nul(value: str) -> str:
    """A NUL ends a C string: no path, id or name can hold one (the OS refuses it, and so do we, first)."""
    if "\x00" in value:
        raise ValueError("contains a NUL character (\\x00), which no path, id or name can hold")
    return value


NO_NUL = AfterValidator(no_nul)
PathArg = Annotated[str, Field(max_length=MAX_PATH_CHARS), NO_NUL]
IdArg = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS), NO_NUL]  # a checkpoint, model, name
TextArg = Annotated[str, NO_NUL]  # free text (a chat message): any length the plane takes, no NUL

TargetArg = Annotated[
    Literal["local", "cloud"] | None,
    Field(
        description="local: an `opd serve` (free); cloud: Bailian (paid); default: as `opd` (the environment)"
    ),
]
BaseUrlArg = Annotated[
    Annotated[str, Field(max_length=MAX_PATH_CHARS), NO_NUL] | None,
    Field(
        description=f"the control plane's URL (default: {DEFAULT_LOCAL_API} for local, the user's configured "
        "cloud for cloud); for cloud only the URL the user configured or a Bailian host is accepted"
    ),
]
TokenArg = Annotated[
    IdArg | None,
    Field(description="the confirmation_token of this action's first call, once the user said yes"),
]
WorkspaceArg = Annotated[
    str,
    Field(max_length=MAX_PATH_CHARS, description="the workspace folder (config.yaml, data/, functions)"),
    NO_NUL,
]
ConfigArg = Annotated[
    str, Field(max_length=MAX_PATH_CHARS, description="the job YAML inside the workspace"), NO_NUL
]
JobIdArg = Annotated[
    str,
    Field(min_length=1, max_length=MAX_ID_CHARS, description="the job id (`list_jobs` lists them)"),
    NO_NUL,
]
P = ParamSpec("P")
R = TypeVar("R")


def client_for(target: str | None, base_url: str | None, workspace: str | None = None) -> Any:
    """A JobClient for the plane the tool names, by the one resolver: a loopback URL is local (its own
    key), and the cloud key goes only to the cloud URL the user configured, never to one an argument names."""
    from opd_nb.client import JobClient, resolve_target

    return JobClient(resolve_target(target, base_url=base_url, workspace=workspace))


def tool_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """An OpdError becomes the tool error an agent reads: the CLI's one line, with its fix."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except OpdError as exc:
            raise ToolError(str(exc)) from None

    return wrapper


@dataclass
class AgentState:
    """What one `opd mcp` process remembers between calls."""

    consent: ConsentBook = field(default_factory=ConsentBook)
    guards: dict[str, Any] = field(default_factory=dict)  # job id -> opd_nb.health.guard.Guard
    alerts: dict[str, Any] = field(default_factory=dict)  # job id -> opd_nb.health.rules.AlertTracker


STATE = AgentState()  # this process's: one `opd mcp` serves one agent
