"""The messages between the control plane and its fork server, one JSON line each, typed on both ends.

Why: they cross a process (:mod:`opd_nb.server.launcher` writes requests, :mod:`opd_nb.server.forkserver`
answers), so each side validates what it reads instead of indexing a dict it trusts. The shapes are the
protocol described in :mod:`opd_nb.server.forkserver`: each message is told apart by its keys (every
model forbids the others' keys, so exactly one of :data:`ForkReply` fits a line).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, TypeAdapter


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def line(self) -> bytes:
        """The message as one line of the pipe."""
        return self.model_dump_json(exclude_none=True).encode() + b"\n"


class SpawnRequest(_Message):
    """Fork a child that becomes ``python -m module args`` with this environment, directory, log and title."""

    id: int
    module: str
    args: list[str]
    env: dict[str, str]
    cwd: str
    log: str
    title: str


class Ready(_Message):
    """The fork server has imported what it preimports; ``ready`` is its pid."""

    ready: int


class Spawned(_Message):
    """Request ``id`` became child ``pid``."""

    id: int
    pid: int


class SpawnFailed(_Message):
    """Request ``id`` failed (``id`` is None when the fork server itself is gone)."""

    id: int | None = None
    error: str


class Exited(_Message):
    """Child ``exited`` ended with ``code`` (``Popen.returncode``'s convention)."""

    exited: int
    code: int


ForkReply = Ready | Spawned | SpawnFailed | Exited
REPLY = TypeAdapter[ForkReply](ForkReply)
