"""Where jobs go: a local `opd serve` or Bailian, with the key from the environment or a `.env` file.

Resolved on every call (not cached at import like the SDK does), so switching targets in a
notebook takes effect immediately (:func:`use_target` is that switch). The key is a ``SecretStr``
and never appears in a repr; :class:`TargetInfo` only says whether one is set and where from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from opd_nb import settings
from opd_nb.constants import DEFAULT_CLOUD_API, DEFAULT_LOCAL_API, LOCAL_API_KEY
from opd_nb.errors import OpdError
from opd_nb.loopback import is_loopback_url
from opd_nb.results import ResultMixin
from opd_nb.workspace.connection import (
    API_KEY_VAR,
    BASE_URL_VAR,
    Target,
    normalize_base,
    require_key,
    resolve_connection,
)

__all__ = [
    "API_KEY_VAR",
    "BASE_URL_VAR",
    "Target",
    "TargetInfo",
    "normalize_base",
    "require_key",
    "resolve_target",
    "use_target",
]

_PLACEHOLDER_MARK = settings.LOCAL_KEY_MARK.name  # set while `use local` supplied the placeholder key itself


def resolve_target(
    kind: str | None = None, *, base_url: str | None = None, workspace: str | Path | None = None
) -> Target:
    """The control plane and key for a request (:func:`opd_nb.workspace.connection.resolve_connection`:
    the one precedence, and the cloud key only to the cloud URL the user configured)."""
    return resolve_connection(kind, base_url=base_url, workspace=workspace)


class TargetInfo(ResultMixin, BaseModel):
    """The target `use` selected. Never holds the key itself: only whether one is set and where from."""

    kind: Literal["local", "cloud"]
    base_url: str
    key_set: bool
    key_source: str
    exports: list[str] = []  # shell lines for the CLI (the shell's env can't be changed from here)

    def __str__(self) -> str:
        key = (
            f"API key: set ({self.key_source})"
            if self.key_set
            else "API key: NOT set (DASHSCOPE_API_KEY in env or .env)"
        )
        lines = [f"target: {self.kind}  {self.base_url}", key]
        if self.exports:
            lines += ["run in your shell:", *[f"  {line}" for line in self.exports]]
        return "\n".join(lines)

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(str(self))  # plain text: a "[...]" in a URL or path is not rich markup

    def _repr_html_(self) -> str:
        from opd_nb.views import render

        key = (
            f'<span class="ok">set</span> ({render.esc(self.key_source)})'
            if self.key_set
            else '<span class="bad">not set</span> (put DASHSCOPE_API_KEY in the environment or .env)'
        )
        return render.box(
            render.table(["target", "base URL", "API key"], [(self.kind, self.base_url, key)], raw_cols=(2,))
        )


def use_target(kind: str, base_url: str | None = None, *, shell_exports: bool = False) -> TargetInfo:
    """Point this process (the notebook kernel) at the local control plane or at Bailian.

    Sets ``DASHSCOPE_HTTP_BASE_URL``, which both the SDK and this client read, to `base_url` (default:
    the kind's default URL; the CLI passes the running background server's). For local, the SDK in
    this process needs some key, so a placeholder is set when the environment has none; ``use
    cloud`` removes only that placeholder, never a key the user set. `shell_exports` adds the line
    a terminal user must run (a command cannot change its shell's environment).
    """
    if kind not in ("local", "cloud"):
        raise OpdError(f"unknown target {kind!r}", fix="use 'local' or 'cloud'")
    api = (
        normalize_base(base_url)
        if base_url
        else (DEFAULT_LOCAL_API if kind == "local" else DEFAULT_CLOUD_API)
    )
    if kind == "local" and not is_loopback_url(api):
        raise OpdError(f"{api} is not a loopback address", fix="the local control plane listens on 127.0.0.1")
    if kind == "cloud" and is_loopback_url(api):
        raise OpdError(f"{api} is a loopback address", fix="use `use local` for the local control plane")
    os.environ[BASE_URL_VAR] = api
    if kind == "local" and not settings.DASHSCOPE_API_KEY.get():
        os.environ[API_KEY_VAR] = LOCAL_API_KEY
        os.environ[_PLACEHOLDER_MARK] = "1"
    elif kind == "cloud" and settings.LOCAL_KEY_MARK.pop():
        if settings.DASHSCOPE_API_KEY.get() == LOCAL_API_KEY:
            del os.environ[API_KEY_VAR]
    key_set, source = _key_status(kind, api)
    exports = [f"export {BASE_URL_VAR}={api}"] if shell_exports else []
    return TargetInfo(kind=kind, base_url=api, key_set=key_set, key_source=source, exports=exports)


def _key_status(kind: Literal["local", "cloud"], api: str) -> tuple[bool, str]:
    """Whether the target now has a key, and where from (never the key itself)."""
    target = resolve_target(kind, base_url=api)
    if target.api_key is None or not target.api_key.get_secret_value():
        return False, ""
    return True, target.key_source
