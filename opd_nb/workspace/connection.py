"""Where a workspace's requests go and with which key: the one connection resolver.

Every surface (the client, `opd check`, the notebook's target, `opd mcp`, and through the child's
environment the workspace's `submit_job.py`) asks here, so `opd check` reads the plane `opd submit` sends
to. One precedence for ``DASHSCOPE_HTTP_BASE_URL`` and ``DASHSCOPE_API_KEY``: the environment (which
``use local|cloud`` sets in a kernel), then the workspace's ``.env``, then the working directory's
``.env``, then the default. The rule of trust: **the cloud key goes only to the cloud URL the user
configured** (``OPD_CLOUD_BASE_URL``, else ``DASHSCOPE_HTTP_BASE_URL`` when it is not loopback, else
Bailian's default) or to one of Bailian's documented hosts. A URL that arrives as an argument (an agent's tool call, a script) never redirects it,
and a local plane gets its own key (``OPD_SERVE_API_KEY``, else the placeholder), never the cloud one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr

from opd_nb import settings
from opd_nb.constants import API_PATH, DEFAULT_CLOUD_API, DEFAULT_LOCAL_API, LOCAL_API_KEY
from opd_nb.errors import OpdError
from opd_nb.loopback import is_loopback_url
from opd_nb.workspace.dotenv_file import read_dotenv

BASE_URL_VAR = settings.DASHSCOPE_BASE_URL.name  # what the dashscope SDK and this client read
API_KEY_VAR = settings.DASHSCOPE_API_KEY.name
FC_KEY_VAR = settings.FC_API_KEY.name  # the SDK's key for function calls, else DASHSCOPE_API_KEY
Plane = Literal["local", "cloud"]

# Bailian's documented API hosts (dashscope 2.0.2: common/env.py, v2/_config.py): the shared gateways and the
# workspace-scoped MaaS gateway of each region. Only https.
_BAILIAN_HOSTS = (
    "dashscope.aliyuncs.com",
    "dashscope-intl.aliyuncs.com",
    "cn-hongkong.dashscope.aliyuncs.com",
)
_MAAS_REGIONS = ("cn-beijing", "ap-southeast-1", "cn-hongkong", "us-east-1", "eu-central-1", "ap-northeast-1")
_REGIONS = "|".join(map(re.escape, _MAAS_REGIONS))
_MAAS_HOST = re.compile(rf"^[a-z0-9][a-z0-9-]{{0,62}}\.({_REGIONS})\.maas\.aliyuncs\.com$")


class Target(BaseModel):
    """A resolved control plane: its kind, API base, the key it gets, and where each came from."""

    model_config = ConfigDict(frozen=True)

    kind: Plane
    base_url: str  # ends with /api/v1
    api_key: SecretStr | None = None
    url_source: str = "argument"
    key_source: str = ""

    def env(self) -> dict[str, str]:
        """Environment for a subprocess running the dashscope SDK against this target. For a local plane the
        SDK's function key is this key too, so a cloud ``FC_API_KEY`` never goes there."""
        out = {BASE_URL_VAR: self.base_url}
        if self.api_key is not None:
            key = self.api_key.get_secret_value()
            out[API_KEY_VAR] = key
            if self.kind == "local":
                out[FC_KEY_VAR] = key
        return out

    def __str__(self) -> str:
        return f"{self.kind} {self.base_url} (key {'set' if self.api_key else 'NOT set'})"


# Where `--local` without a URL (and any local request given no URL) goes: resolve_connection's rule, in words.
LOCAL_URL_RULE = f"${settings.DASHSCOPE_BASE_URL.name} when it is a loopback URL, else {DEFAULT_LOCAL_API}"
NO_CLOUD_KEY = "no-api-key"


def require_key(target: Target) -> None:
    """A request to the cloud without a key fails here, before the network: Bailian would answer 401 (or,
    unreachable, a ConnectError seconds later), and a shell that never set a key most likely meant the
    local plane."""
    if target.kind == "cloud" and (target.api_key is None or not target.api_key.get_secret_value()):
        raise OpdError(
            f"no API key for the cloud control plane ({target.base_url}): {API_KEY_VAR} is set neither in the "
            "environment nor in .env",
            fix="for a local `opd serve`, pass --local or run `opd use local` (and the export line it prints); "
            f"for Bailian, export {API_KEY_VAR}=sk-... or put it in the workspace's .env",
            code=NO_CLOUD_KEY,
        )


def normalize_base(url: str) -> str:
    """An http(s) URL ending with /api/v1, whether the user wrote the server's root or its API base."""
    url = url.strip().rstrip("/")
    try:
        parsed = urlsplit(url)
        ok = parsed.scheme in ("http", "https") and bool(parsed.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise OpdError(f"{url!r} is not an http(s) URL", fix="use e.g. http://127.0.0.1:8765 or .../api/v1")
    return url if url.endswith(API_PATH) else url + API_PATH


def is_bailian_url(url: str) -> bool:
    """True for an https URL on one of Bailian's documented API hosts."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".")
        return (
            parts.scheme == "https"
            and parts.port in (None, 443)
            and (host in _BAILIAN_HOSTS or bool(_MAAS_HOST.match(host)))
        )
    except ValueError:
        return False


class _Sources:
    """The environment and the two `.env` files, read once, in the one precedence."""

    def __init__(self, workspace: str | Path | None):
        self.files: list[tuple[str, dict[str, str]]] = []
        if workspace is not None:
            ws = Path(workspace)
            ws = ws.parent if ws.is_file() else ws
            self.files.append((str(ws / ".env"), read_dotenv(ws / ".env").values))
        cwd = Path.cwd() / ".env"
        if not self.files or Path(self.files[0][0]).resolve() != cwd.resolve():
            self.files.append((".env", read_dotenv(cwd).values))

    def _all(self) -> list[tuple[str, Mapping[str, str]]]:
        return [("environment", os.environ), *self.files]

    def setting(self, setting: settings.Setting[str]) -> tuple[str | None, str]:
        """(value, where it was set) of a declared text variable, from the three places in their order (an
        empty value counts as unset, as the SDK's users expect)."""
        for where, values in self._all():
            value = setting.get(values)
            if value:
                return value, f"{setting.name} ({where})"
        return None, ""


def _configured_cloud(src: _Sources) -> tuple[str, str]:
    """(the cloud API base the user configured, where from): ``OPD_CLOUD_BASE_URL``, else
    ``DASHSCOPE_HTTP_BASE_URL`` when it is not loopback (a loopback one is the local plane), else Bailian's."""
    declared, where = src.setting(settings.CLOUD_BASE_URL)
    if declared:
        return normalize_base(declared), where
    url, where = src.setting(settings.DASHSCOPE_BASE_URL)
    if url and not is_loopback_url(url):
        return normalize_base(url), where
    return DEFAULT_CLOUD_API, "default"


def resolve_connection(
    kind: str | None = None, *, base_url: str | None = None, workspace: str | Path | None = None
) -> Target:
    """The plane, URL and key for a request, each with where it came from.

    `kind` None follows the configured URL (loopback: local, else cloud). A `base_url` argument is a local
    plane when loopback or when `kind` is local (a local server on a peer host); as the cloud it must be the
    configured cloud URL or a documented Bailian host, else an OpdError says why and how to configure it.
    """
    if kind not in (None, "local", "cloud"):
        raise OpdError(f"unknown target {kind!r}", fix="use 'local' or 'cloud'")
    src = _Sources(workspace)
    env_url, env_where = src.setting(settings.DASHSCOPE_BASE_URL)
    cloud_url, cloud_where = _configured_cloud(src)
    local_env = env_url if env_url and is_loopback_url(env_url) else None
    plane: Plane
    if base_url:
        url, where = normalize_base(base_url), "argument"
        plane = "local" if kind == "local" or (kind is None and _is_local_arg(url, cloud_url)) else "cloud"
        if plane == "cloud":
            _check_cloud_destination(url, cloud_url)
    elif kind == "cloud" or (kind is None and local_env is None):
        plane, url, where = "cloud", cloud_url, cloud_where
    elif local_env is not None:
        plane, url, where = "local", normalize_base(local_env), env_where
    else:
        plane, url, where = "local", DEFAULT_LOCAL_API, "default"
    key, key_where = _key_for(plane, src)
    return Target(kind=plane, base_url=url, api_key=key, url_source=where, key_source=key_where)


def _is_local_arg(url: str, cloud_url: str) -> bool:
    """An argument URL with no plane named: local when loopback, unless it is the configured cloud URL."""
    return is_loopback_url(url) and not _same_base(url, cloud_url)


def _same_base(a: str, b: str) -> bool:
    return a.rstrip("/").lower() == b.rstrip("/").lower()


def _check_cloud_destination(url: str, cloud_url: str) -> None:
    """Refuse a cloud request to a URL the user did not configure: the cloud key would go there."""
    if _same_base(url, cloud_url) or is_bailian_url(url):
        return
    what = (
        "a loopback address (a local control plane)"
        if is_loopback_url(url)
        else "not the cloud URL you configured"
    )
    raise OpdError(
        f"refusing to send your cloud API key to {urlsplit(url).netloc}: it is {what} ({cloud_url}) "
        "and no documented Bailian host",
        fix=f"to use another cloud endpoint, set {settings.CLOUD_BASE_URL.name} to it in the environment or the "
        "workspace's .env; a local `opd serve` is the local target, which gets its own key",
    )


def _key_for(plane: Plane, src: _Sources) -> tuple[SecretStr | None, str]:
    """The cloud key (not the local placeholder) for the cloud; the server key, else the placeholder, locally."""
    if plane == "local":
        server_key, where = src.setting(settings.SERVE_API_KEY)
        if server_key:
            return SecretStr(server_key), where
        return SecretStr(LOCAL_API_KEY), "placeholder for the local server"
    key, where = src.setting(settings.DASHSCOPE_API_KEY)
    if not key or (key == LOCAL_API_KEY and settings.LOCAL_KEY_MARK.get()):
        return None, ""
    return SecretStr(key), where
