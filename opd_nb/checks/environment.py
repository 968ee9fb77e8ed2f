"""Environment rules: SDK version, API key, and the SDK's import-time base URL."""

from __future__ import annotations

import os
import sys
from importlib import metadata

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from opd_nb.checks.context import CheckContext
from opd_nb.constants import DEFAULT_CLOUD_API
from opd_nb.loopback import is_loopback_url
from opd_nb.workspace.connection import resolve_connection
from opd_nb.workspace.dotenv_file import DotenvFile, read_dotenv

MIN_DASHSCOPE = (2, 0, 2)  # 1.27.5 silently drops teacher_model and submits plain RL
_TRUE = ("true", "1", "yes")  # the SDK's FC_LAYER_USED test (constants.py:118)
_FALSE = ("false", "0", "no")


def _version_tuple(text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _dotenv(ctx: CheckContext) -> DotenvFile:
    """The workspace's .env (what submit_job.py loads); each line it would refuse is a finding (text not shown)."""
    path = ctx.workspace / ".env"
    dotenv = read_dotenv(path)
    for problem in dotenv.problems:
        ctx.report.add(
            "env.dotenv-malformed",
            "error",
            f"{ctx.rel(path)}:{problem.line}",
            f"{problem.reason}; submit_job.py refuses the file (the line is not shown: it may hold a key)",
            "write one KEY=VALUE per line (`export KEY=VALUE`, quotes and # comments are fine), "
            "e.g. DASHSCOPE_API_KEY=sk-...",
        )
    return dotenv


def _where_set(ctx: CheckContext, name: str, dotenv: DotenvFile) -> str:
    """Where a variable comes from: the environment (its name), else the .env line that sets it."""
    if os.environ.get(name) or name not in dotenv.lines:
        return name
    return f"{ctx.rel(ctx.workspace / '.env')}:{dotenv.lines[name]}"


def _function_runtime(ctx: CheckContext, dotenv: DotenvFile) -> None:
    """FC_PYPI_LIB and FC_LAYER_USED, which the SDK bakes into every registered function (start.sh)."""
    from opd_nb.checks.function_code import exclude_patterns, excluded_by

    zipdirs = list(
        dict.fromkeys(  # one finding per folder, however many functions zip it
            ctx.resolve(str((f.get("fcmodel") or {}).get("zipdir") or "./")).resolve()
            for f in ctx.raw_functions()
            if not f.get("entity_id") and isinstance(f.get("fcmodel") or {}, dict)
        )
    )
    if not zipdirs:
        return  # pure distillation (or every function reused): no function runtime is built
    lib = (os.environ.get("FC_PYPI_LIB") or dotenv.values.get("FC_PYPI_LIB", "")).strip()
    _sdk_wheel(ctx, lib, dotenv)
    if lib and (lib.endswith(".whl") or "/" in lib or "\\" in lib):
        rule, where = "env.fc-pypi-lib", _where_set(ctx, "FC_PYPI_LIB", dotenv)
        fix = "copy the wheel into the workspace (zipdir) and set FC_PYPI_LIB=./<wheel file name>"
        if os.path.isabs(lib) or lib.startswith("~"):
            msg = f"FC_PYPI_LIB is the absolute path {lib}: the function runtime resolves it remotely, where it does not exist"
            ctx.report.add(rule, "error", where, msg, fix)
            return
        for zipdir in zipdirs:
            wheel = zipdir / lib
            if not wheel.is_file():
                msg = f"FC_PYPI_LIB {lib} does not exist under zipdir {ctx.rel(zipdir) or '.'}: the runtime cannot install the SDK"
                ctx.report.add(rule, "error", where, msg, fix)
            elif excluded_by(os.path.relpath(wheel, zipdir).replace("\\", "/"), exclude_patterns()):
                msg = f"FC_PYPI_LIB {lib} is left out of the function zip (FC_ZIP_EXCLUDE_PATTERNS), so it never reaches the runtime"
                ctx.report.add(rule, "error", where, msg, "keep the wheel at the zipdir's root")
    layer = (os.environ.get("FC_LAYER_USED") or dotenv.values.get("FC_LAYER_USED", "")).strip()
    if layer and layer.lower() not in _TRUE + _FALSE:
        ctx.report.add(
            "env.fc-layer-used",
            "warning",
            _where_set(ctx, "FC_LAYER_USED", dotenv),
            f"FC_LAYER_USED={layer!r} is neither true nor false: the SDK reads anything but true/1/yes as false, "
            "so requirements.txt is installed at every cold start instead of once as a layer",
            "set FC_LAYER_USED=true (the default: a layer from requirements.txt) or false",
        )


# Seed 001, environment preparation: "FC_PYPI_LIB(required): specifies the SDK package installed in the
# function runtime, fill in the wheel relative path ...; pure distillation (functions=None) does not involve
# function runtime, this item can be skipped", and of the wheel "本机与远端均按此版本安装" (this machine and
# the remote side both install this version).
_FC_PYPI_LIB_DOC = "seed 001: FC_PYPI_LIB is required for a job with functions"


def _sdk_wheel(ctx: CheckContext, lib: str, dotenv: DotenvFile) -> None:
    """FC_PYPI_LIB unset for a cloud job with functions, or naming an SDK wheel of another version than the
    one installed here (the docs install the same version on both sides)."""
    if not lib:
        if ctx.target == "cloud":
            ctx.report.add(
                "env.fc-pypi-lib",
                "warning",
                "FC_PYPI_LIB",
                f"FC_PYPI_LIB is not set ({_FC_PYPI_LIB_DOC}): the function runtime then installs no SDK of its "
                "own (start.sh's SDK_PACKAGE is empty) and gets dashscope only if requirements.txt lists it, "
                "in whatever version pip picks there",
                "copy the SDK wheel you installed here into the workspace and set "
                "FC_PYPI_LIB=./dashscope-<version>-py3-none-any.whl (in .env)",
            )
        return
    local = _installed_sdk()
    for item in lib.split():
        wheel = item.partition("[")[0]
        if not wheel.endswith(".whl"):
            continue
        try:
            name, version, _, _ = parse_wheel_filename(os.path.basename(wheel))
        except InvalidWheelFilename:
            continue
        if canonicalize_name(name) == "dashscope" and local is not None and Version(local) != version:
            ctx.report.add(
                "env.fc-pypi-lib",
                "warning",
                _where_set(ctx, "FC_PYPI_LIB", dotenv),
                f"FC_PYPI_LIB installs dashscope {version} in the function runtime, but dashscope {local} is "
                "installed here: the docs install the same SDK version on this machine and remotely, so the "
                "functions you tested here run on another SDK in the cloud",
                f"point FC_PYPI_LIB at the dashscope-{local} wheel, or install the wheel's version here "
                f"(python -m pip install {wheel})",
            )


def _installed_sdk() -> str | None:
    try:
        return metadata.version("dashscope")
    except metadata.PackageNotFoundError:
        return None


def check_environment(ctx: CheckContext) -> None:
    rep = ctx.report
    dotenv = _dotenv(ctx)
    if ctx.raw:
        _function_runtime(ctx, dotenv)
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
        if resolve_connection("cloud", workspace=ctx.workspace).api_key is None:
            rep.add(
                "env.no-api-key",
                "error",
                "environment",
                "no DASHSCOPE_API_KEY in the environment or in .env: the SDK sends an empty key and submission "
                "fails (3001/3005)",
                "export DASHSCOPE_API_KEY=sk-... or put it in the workspace's .env (never in config.yaml)",
            )
        if is_loopback_url(env_url):
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
    now = env_url or DEFAULT_CLOUD_API
    if frozen.rstrip("/") != now.rstrip("/"):
        ctx.report.add(
            "env.base-url-changed",
            "warning",
            "DASHSCOPE_HTTP_BASE_URL",
            f"dashscope was imported in this process while DASHSCOPE_HTTP_BASE_URL was {frozen}; it is now {now}, "
            "but the SDK keeps the old value (it is read once, at import)",
            "restart the kernel (or submit with `opd submit`, which runs the SDK in a fresh process)",
        )
