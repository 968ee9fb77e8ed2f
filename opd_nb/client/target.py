"""Where jobs go: a local `opd serve` or Bailian, with the key from the environment or a `.env` file.

Resolved on every call (not cached at import like the SDK does), so switching targets in a
notebook takes effect immediately. The key is a ``SecretStr`` and never appears in a repr.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, SecretStr

from opd_nb.errors import OpdError

DEFAULT_LOCAL = "http://127.0.0.1:8765/api/v1"
DEFAULT_CLOUD = "https://dashscope.aliyuncs.com/api/v1"
LOCAL_KEY = "local"


class Target(BaseModel):
    kind: Literal["local", "cloud"]
    base_url: str  # ends with /api/v1
    api_key: SecretStr | None = None

    def env(self) -> dict[str, str]:
        """Environment for a subprocess running the dashscope SDK against this target."""
        out = {"DASHSCOPE_HTTP_BASE_URL": self.base_url}
        if self.api_key is not None:
            out["DASHSCOPE_API_KEY"] = self.api_key.get_secret_value()
        return out

    def __str__(self) -> str:
        return f"{self.kind} {self.base_url} (key {'set' if self.api_key else 'NOT set'})"


def is_loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _dotenv(paths: list[Path]) -> dict[str, str]:
    from dotenv import dotenv_values

    merged: dict[str, str] = {}
    for path in paths:
        if path.is_file():
            merged.update({k: v for k, v in dotenv_values(path).items() if v is not None})
    return merged


def normalize_base(url: str) -> str:
    url = url.strip().rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise OpdError(f"{url!r} is not an http(s) URL", fix="use e.g. http://127.0.0.1:8765 or .../api/v1")
    if not url.endswith("/api/v1"):
        url += "/api/v1"
    return url


def resolve_target(
    kind: str | None = None, *, base_url: str | None = None, workspace: str | Path | None = None
) -> Target:
    """Build a Target from arguments, the environment and the workspace's (or CWD's) `.env`.

    Precedence: explicit `base_url` > ``DASHSCOPE_HTTP_BASE_URL`` in the environment > `.env` >
    default for the kind. `kind` None means local when the URL is loopback, else cloud.
    """
    if kind not in (None, "local", "cloud"):
        raise OpdError(f"unknown target {kind!r}", fix="use 'local' or 'cloud'")
    files = [Path.cwd() / ".env"]
    if workspace is not None:
        files.append(Path(workspace) / ".env")
    dotenv = _dotenv(files)

    def get(name: str) -> str | None:
        return os.environ.get(name) or dotenv.get(name) or None

    env_url = get("DASHSCOPE_HTTP_BASE_URL")
    if base_url:
        url = normalize_base(base_url)
    elif kind == "local":
        url = normalize_base(env_url) if env_url and is_loopback(env_url) else DEFAULT_LOCAL
    elif kind == "cloud":
        url = normalize_base(env_url) if env_url and not is_loopback(env_url) else DEFAULT_CLOUD
    else:
        url = normalize_base(env_url) if env_url else DEFAULT_CLOUD
    resolved_kind: Literal["local", "cloud"] = "local" if is_loopback(url) else "cloud"
    if kind == "local" and resolved_kind != "local":
        resolved_kind = "local"  # a user-named local server on another host (e.g. a Binder peer)
    key = get("DASHSCOPE_API_KEY")
    if not key and resolved_kind == "local":
        key = LOCAL_KEY  # the local server accepts any non-empty key
    return Target(kind=resolved_kind, base_url=url, api_key=SecretStr(key) if key else None)
