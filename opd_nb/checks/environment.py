"""Environment rules: SDK version, API key, and the SDK's import-time base URL."""

from __future__ import annotations

import os
import sys
from importlib import metadata
from urllib.parse import urlparse

from opd_nb.checks.context import CheckContext

MIN_DASHSCOPE = (2, 0, 2)  # 1.27.5 silently drops teacher_model and submits plain RL
CLOUD_BASE = "https://dashscope.aliyuncs.com/api/v1"
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def _version_tuple(text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _dotenv_key(ctx: CheckContext) -> bool:
    from dotenv import dotenv_values

    for path in (ctx.workspace / ".env", os.path.join(os.getcwd(), ".env")):
        if os.path.isfile(path):
            values = dotenv_values(path)
            if values.get("DASHSCOPE_API_KEY") or values.get("FC_API_KEY"):
                return True
    return False


def is_loopback(url: str | None) -> bool:
    return bool(url) and (urlparse(url).hostname or "") in _LOOPBACK


def check_environment(ctx: CheckContext) -> None:
    rep = ctx.report
    try:
        version = metadata.version("dashscope")
    except metadata.PackageNotFoundError:
        rep.add(
            "env.dashscope-missing",
            "error",
            "python environment",
            "the dashscope SDK is not installed",
            "pip install 'dashscope>=2.0.2'",
        )
        version = None
    if version is not None and _version_tuple(version) < MIN_DASHSCOPE:
        rep.add(
            "env.dashscope-too-old",
            "error",
            "python environment",
            f"dashscope {version} is older than 2.0.2: it has no OPD and silently drops teacher_model (the job "
            "runs as plain RL)",
            "pip install -U 'dashscope>=2.0.2'",
        )
    env_url = os.environ.get("DASHSCOPE_HTTP_BASE_URL")
    if ctx.target == "cloud":
        if not (os.environ.get("DASHSCOPE_API_KEY") or os.environ.get("FC_API_KEY") or _dotenv_key(ctx)):
            rep.add(
                "env.no-api-key",
                "error",
                "environment",
                "no DASHSCOPE_API_KEY in the environment or in .env: the SDK sends an empty key and submission "
                "fails (3001/3005)",
                "export DASHSCOPE_API_KEY=sk-... or put it in the workspace's .env (never in config.yaml)",
            )
        if is_loopback(env_url):
            rep.add(
                "env.cloud-target-local-url",
                "warning",
                "DASHSCOPE_HTTP_BASE_URL",
                f"the target is the cloud but DASHSCOPE_HTTP_BASE_URL points at {env_url}",
                "unset DASHSCOPE_HTTP_BASE_URL for the cloud, or check with --target local",
            )
    _base_url_changed(ctx, env_url)


def _base_url_changed(ctx: CheckContext, env_url: str | None) -> None:
    """In a live process (a notebook kernel) the SDK froze DASHSCOPE_HTTP_BASE_URL when it was imported."""
    consts = sys.modules.get("dashscope.finetune.reinforcement.common.constants")
    frozen = getattr(consts, "DASHSCOPE_HTTP_BASE_URL", None) if consts is not None else None
    if frozen is None:
        ds = sys.modules.get("dashscope")
        if ds is None:
            return
        frozen = getattr(ds, "base_http_api_url", None)
        if frozen is None:
            return
    now = env_url or CLOUD_BASE
    if frozen.rstrip("/") != now.rstrip("/"):
        ctx.report.add(
            "env.base-url-changed",
            "warning",
            "DASHSCOPE_HTTP_BASE_URL",
            f"dashscope was imported in this process while DASHSCOPE_HTTP_BASE_URL was {frozen}; it is now {now}, "
            "but the SDK keeps the old value (it is read once, at import)",
            "restart the kernel (or submit with `opd submit`, which runs the SDK in a fresh process)",
        )
