"""Where jobs go: a local `opd serve` or Bailian, with the key from the environment or a `.env` file.

Resolved on every call (not cached at import like the SDK does), so switching targets in a
notebook takes effect immediately (:func:`use_target` is that switch). The key is a ``SecretStr``
and never appears in a repr; :class:`TargetInfo` only says whether one is set and where from.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, SecretStr

from opd_nb import settings
from opd_nb.constants import API_PATH, DEFAULT_CLOUD_API, DEFAULT_LOCAL_API, LOCAL_API_KEY
from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin
from opd_nb.workspace.dotenv_file import read_dotenv

BASE_URL_VAR = "DASHSCOPE_HTTP_BASE_URL"  # what the dashscope SDK and this client read
API_KEY_VAR = "DASHSCOPE_API_KEY"
_PLACEHOLDER_MARK = settings.LOCAL_KEY_MARK.name  # set while `use local` supplied the placeholder key itself


class Target(BaseModel):
    kind: Literal["local", "cloud"]
    base_url: str  # ends with /api/v1
    api_key: SecretStr | None = None

    def env(self) -> dict[str, str]:
        """Environment for a subprocess running the dashscope SDK against this target."""
        out = {BASE_URL_VAR: self.base_url}
        if self.api_key is not None:
            out[API_KEY_VAR] = self.api_key.get_secret_value()
        return out

    def __str__(self) -> str:
        return f"{self.kind} {self.base_url} (key {'set' if self.api_key else 'NOT set'})"


def is_loopback(url: str) -> bool:
    """True for localhost and any loopback IP (127.0.0.0/8, ::1): where a local control plane runs."""
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _dotenv(paths: list[Path]) -> dict[str, str]:
    """The values of each `.env` (python-dotenv's grammar, as submit_job.py reads it), later files winning."""
    merged: dict[str, str] = {}
    for path in paths:
        merged.update(read_dotenv(path).values)
    return merged


def normalize_base(url: str) -> str:
    """An http(s) URL ending with /api/v1, whether the user wrote the server's root or its API base."""
    url = url.strip().rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise OpdError(f"{url!r} is not an http(s) URL", fix="use e.g. http://127.0.0.1:8765 or .../api/v1")
    if not url.endswith(API_PATH):
        url += API_PATH
    return url


def resolve_target(
    kind: str | None = None, *, base_url: str | None = None, workspace: str | Path | None = None
) -> Target:
    """Build a Target from arguments, the environment and the workspace's (or CWD's) `.env`.

    Precedence: explicit `base_url` > ``DASHSCOPE_HTTP_BASE_URL`` in the environment > `.env` >
    default for the kind. `kind` None means local when the URL is loopback, else cloud; a `kind` named
    together with a `base_url` is kept (a local server on another host, Bailian behind a local proxy).
    """
    if kind not in (None, "local", "cloud"):
        raise OpdError(f"unknown target {kind!r}", fix="use 'local' or 'cloud'")
    files = [Path.cwd() / ".env"]
    if workspace is not None:
        files.append(Path(workspace) / ".env")
    dotenv = _dotenv(files)

    def get(name: str) -> str | None:
        return os.environ.get(name) or dotenv.get(name) or None

    env_url = get(BASE_URL_VAR)
    if base_url:
        url = normalize_base(base_url)
    elif kind == "local":
        url = normalize_base(env_url) if env_url and is_loopback(env_url) else DEFAULT_LOCAL_API
    elif kind == "cloud":
        url = normalize_base(env_url) if env_url and not is_loopback(env_url) else DEFAULT_CLOUD_API
    else:
        url = normalize_base(env_url) if env_url else DEFAULT_CLOUD_API
    resolved_kind: Literal["local", "cloud"] = "local" if is_loopback(url) else "cloud"
    if kind == "local" and resolved_kind != "local":
        resolved_kind = "local"  # a user-named local server on another host (e.g. a Binder peer)
    if kind == "cloud" and base_url and resolved_kind != "cloud":
        resolved_kind = "cloud"  # Bailian behind a URL the user named (a local proxy): still the paid plane
    key = get(API_KEY_VAR)
    if not key and resolved_kind == "local":
        key = LOCAL_API_KEY  # the local server accepts any non-empty key
    return Target(kind=resolved_kind, base_url=url, api_key=SecretStr(key) if key else None)


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
    if kind == "local" and not is_loopback(api):
        raise OpdError(f"{api} is not a loopback address", fix="the local control plane listens on 127.0.0.1")
    if kind == "cloud" and is_loopback(api):
        raise OpdError(f"{api} is a loopback address", fix="use `use local` for the local control plane")
    os.environ[BASE_URL_VAR] = api
    if kind == "local" and not os.environ.get(API_KEY_VAR):
        os.environ[API_KEY_VAR] = LOCAL_API_KEY
        os.environ[_PLACEHOLDER_MARK] = "1"
    elif kind == "cloud" and settings.LOCAL_KEY_MARK.pop():
        if os.environ.get(API_KEY_VAR) == LOCAL_API_KEY:
            del os.environ[API_KEY_VAR]
    key_set, source = _key_status(kind, api)
    exports = [f"export {BASE_URL_VAR}={api}"] if shell_exports else []
    return TargetInfo(kind=kind, base_url=api, key_set=key_set, key_source=source, exports=exports)


def _key_status(kind: Literal["local", "cloud"], api: str) -> tuple[bool, str]:
    """Whether the target now has a key, and where from (never the key itself)."""
    target = resolve_target(kind, base_url=api)
    if target.api_key is None or not target.api_key.get_secret_value():
        return False, ""
    placeholder = settings.LOCAL_KEY_MARK.get() and os.environ.get(API_KEY_VAR) == LOCAL_API_KEY
    if kind == "local" and placeholder:
        return True, "placeholder for the local server"
    return True, "environment or .env"
