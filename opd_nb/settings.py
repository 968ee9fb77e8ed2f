"""Every ``OPD_*`` environment variable, declared once: its name, type, default and meaning (and the
dashscope SDK's variables that opd-nb reads too, through its one connection resolver).

Code reads them only through a :class:`Setting` here (``tests/test_settings.py`` scans the package for
any other read), so a bad value is one line that names the variable, the value and what is accepted,
never a traceback or a silent fallback. `opd serve` checks them all when it starts, so the processes
it starts inherit good values. The README's table is generated from :data:`SETTINGS`
(``python -m opd_nb.settings --write``; the test fails when the two differ). A leaf: it imports only
:mod:`opd_nb.errors`.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from opd_nb.constants import DEFAULT_CLOUD_API
from opd_nb.errors import OpdError

T = TypeVar("T")
Who = Literal[
    "you", "sdk", "opd-nb", "scripts"
]  # who sets it: the user, the user for the SDK (opd-nb reads it too), opd-nb for its children, the scripts
_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Kind(Generic[T]):
    """How a value is read: a parser (raises ValueError) and what it accepts, in words."""

    parse: Callable[[str], T]
    accepts: str


def _whole(low: int, high: int | None = None) -> Kind[int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if value < low or (high is not None and value > high):
            raise ValueError(raw)
        return value

    return Kind(parse, f"a whole number {low}..{high}" if high is not None else f"a whole number >= {low}")


def _number(*, positive: bool) -> Kind[float]:
    def parse(raw: str) -> float:
        value = float(raw)
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise ValueError(raw)
        return value

    return Kind(parse, "a number > 0" if positive else "a number >= 0")


def _flag(raw: str) -> bool:
    word = raw.lower()
    if word not in (*_ON, *_OFF):
        raise ValueError(raw)
    return word in _ON


def headers(raw: str) -> dict[str, str]:
    """``NAME=VALUE`` pairs separated by commas or new lines (ValueError on one without a name or ``=``)."""
    out: dict[str, str] = {}
    for item in (part.strip() for line in raw.splitlines() for part in line.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError("a header must look like NAME=VALUE")
        out[key.strip()] = value.strip()
    return out


def _json_object(raw: str) -> dict[str, str]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(raw)
    return {str(k): str(v) for k, v in value.items()}


WHOLE_1 = _whole(1)
WHOLE_0 = _whole(0)
PID = _whole(1)
NICE = _whole(0, 19)
NUMBER_0 = _number(positive=False)
POSITIVE = _number(positive=True)
FLAG = Kind(_flag, f"{'/'.join(_ON)} or {'/'.join(_OFF)}")
PATH = Kind(lambda raw: Path(raw).expanduser(), "a path (~ is expanded)")
TEXT = Kind(str, "any text")
HEADERS = Kind(headers, "NAME=VALUE pairs, separated by commas or new lines")
JSON_OBJECT = Kind(_json_object, 'a JSON object, e.g. {"authorization": "Bearer ..."}')


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One ``OPD_*`` variable. An unset or blank value is the default (None: the caller's fallback, in
    ``default_text``)."""

    name: str
    kind: Kind[T]
    default: T | None
    meaning: str
    who: Who = "you"
    secret: bool = False  # never echoed, not even in the error about it
    default_text: str = ""

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The value as set (stripped, but a secret exactly as set: its checks see any whitespace), or None
        when unset or blank."""
        return self._given((os.environ if environ is None else environ).get(self.name, ""))

    def _given(self, value: str) -> str | None:
        return (value if self.secret else value.strip()) or None

    def get(self, environ: Mapping[str, str] | None = None) -> T | None:
        """The parsed value, else the default; a bad value is an :class:`OpdError` that says what is accepted."""
        return self.parse(self.raw(environ))

    def pop(self) -> T | None:
        """The parsed value, taken out of this process's environment (no child inherits it)."""
        return self.parse(self._given(os.environ.pop(self.name, "")))

    def parse(self, raw: str | None) -> T | None:
        if raw is None:
            return self.default
        try:
            return self.kind.parse(raw)
        except ValueError:
            shown = "(the value is hidden: it is a secret)" if self.secret else repr(raw)
            raise OpdError(
                f"the environment variable {self.name}={shown} is not {self.kind.accepts}",
                fix=f"set it to {self.kind.accepts} (default: {self.shown_default()}), or unset it",
            ) from None

    def flag_default(self) -> str:
        """A CLI flag's default, when this setting is what the flag falls back to: generated here, so that a
        help text states the default the code uses."""
        return f"[default: ${self.name}, else {self.shown_default()}]"

    def shown_default(self) -> str:
        if self.default_text:
            return self.default_text
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        return (
            "unset"
            if self.default is None
            else f"{self.default:g}"
            if isinstance(self.default, float)
            else str(self.default)
        )


def on_command_line(flag: str, var: str, file_flag: str, *, notebook: bool = False) -> str:
    """The one-line warning for a secret typed as an option (it never holds the value): a command line is
    shown by `ps` to every user for the process's life and kept in the shell's history; a magic's line is
    saved in the notebook."""
    where = (
        "on the %opd line is saved in the notebook's source"
        if notebook
        else "on the command line is shown to every user by `ps` and kept in the shell's history"
    )
    return f"warning: {flag} {where}; use ${var} or {file_flag} PATH instead"


def read_secret_file(path: str | Path, flag: str, *, lines: bool = False) -> str:
    """The secret a ``--...-file PATH`` option names, without its surrounding white space; a missing,
    unreadable or empty file (or, unless `lines`, one of several lines) is one :class:`OpdError`."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise OpdError(
            f"{flag} {path}: no such file", fix="write the secret into that file, or fix the path"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise OpdError(f"{flag} {path}: cannot read it ({reason})", fix="pass a readable text file") from None
    if not text:
        raise OpdError(f"{flag} {path}: the file is empty", fix="write the secret into it")
    if "\n" in text and not lines:
        raise OpdError(f"{flag} {path}: the file holds more than one line", fix="keep only the secret in it")
    return text


def _user_cache(*parts: str) -> str:
    return str(Path("$XDG_CACHE_HOME (~/.cache)", "opd-nb", *parts))


# ---- set by you -------------------------------------------------------------------------------------
DATA_DIR = Setting(
    "OPD_DATA_DIR",
    PATH,
    None,
    "where `opd serve` keeps jobs, files and checkpoints (`--data-dir` wins)",
    default_text=_user_cache("server"),
)
SERVE_API_KEY = Setting(
    "OPD_SERVE_API_KEY",
    TEXT,
    None,
    "the only key `opd serve` (and `opd mcp`'s server) accepts; needed to listen beyond loopback "
    "(`--api-key-file` or `--api-key` wins)",
    secret=True,
    default_text="none: any key on loopback",
)
CLOUD_BASE_URL = Setting(
    "OPD_CLOUD_BASE_URL",
    TEXT,
    None,
    "the cloud's API base when it is not Bailian's (a gateway or proxy, on this machine too): with "
    "DASHSCOPE_HTTP_BASE_URL (not loopback) and Bailian's documented hosts, the only places your cloud key is sent",
    default_text="none: DASHSCOPE_HTTP_BASE_URL when not loopback, else Bailian",
)
MAX_DEPLOYMENTS = Setting(
    "OPD_MAX_DEPLOYMENTS", WHOLE_1, 3, "deployments `opd serve` runs at once (`--max-deployments` wins)"
)
CHECKPOINT_TTL_DAYS = Setting(
    "OPD_CHECKPOINT_TTL_DAYS",
    NUMBER_0,
    15.0,  # Bailian's documented example: expire_time is 15 days after create_time
    "days a local checkpoint lives before `expire_time` (`--checkpoint-ttl-days` wins)",
)
MAX_ZIP_BYTES = Setting(
    "OPD_MAX_ZIP_BYTES",
    WHOLE_1,
    200 * 1024 * 1024,
    "the largest function zip `opd serve` takes (the SDK's own limit; tests lower it)",
    default_text="209715200 (200 MiB)",
)
MAX_LOG_BYTES = Setting(
    "OPD_MAX_LOG_BYTES",
    WHOLE_1,
    32 * 2**20,
    "the cap of a function server's or job worker's log (the oldest output is cut)",
    default_text="33554432 (32 MiB)",
)
WORKER_NICE = Setting(
    "OPD_WORKER_NICE", NICE, 10, "the nice value of a local job's worker (training is background work)"
)
TORCH_THREADS = Setting(
    "OPD_TORCH_THREADS",
    WHOLE_1,
    None,
    "torch threads of a local job (two jobs on two cores want 1 each)",
    default_text="$OMP_NUM_THREADS, else 2 (1 for a job with function servers)",
)
FORKSERVER = Setting(
    "OPD_FORKSERVER",
    FLAG,
    True,
    "start jobs and deployments from a fork server that imported the engine once (off: a fresh `python -m` each)",
)
STANDIN_STUDENT = Setting(
    "OPD_STANDIN_STUDENT",
    PATH,
    None,
    "the local student model directory (with OPD_STANDIN_TEACHER)",
    default_text="the bundled tiny student",
)
STANDIN_TEACHER = Setting(
    "OPD_STANDIN_TEACHER",
    PATH,
    None,
    "the local teacher model directory (with OPD_STANDIN_STUDENT)",
    default_text="the bundled tiny teacher",
)
FUNCTION_STARTUP_S = Setting(
    "OPD_FUNCTION_STARTUP_S",
    POSITIVE,
    90.0,  # a function server imports the SDK, which takes seconds (more on a loaded machine)
    "seconds a local job waits for its reward/rollout function servers to become healthy "
    "(raise it on a heavily loaded machine)",
)
TRACING = Setting("OPD_TRACING", FLAG, True, "turn the SDK's tracing on in a local job's function servers")
LOCAL_LR = Setting(
    "OPD_LOCAL_LR",
    POSITIVE,
    None,
    "the learning rate of every local job (after a job's own `local_learning_rate`)",
    default_text="the tiny-student mapping",
)
ENGINE_LEAN = Setting(
    "OPD_ENGINE_LEAN",
    FLAG,
    True,
    "the engine's lean forward for Llama-family models (off: always the transformers forward)",
)
ENGINE_MALLOC = Setting(
    "OPD_ENGINE_MALLOC", FLAG, True, "keep freed memory in the engine's heap between steps (glibc mallopt)"
)
ROLLOUTS_PER_STEP = Setting(
    "OPD_ROLLOUTS_PER_STEP", WHOLE_0, 16, "rollouts a local job records per step (0: none)"
)
ROLLOUTS_KEEP_STEPS = Setting(
    "OPD_ROLLOUTS_KEEP_STEPS",
    WHOLE_0,
    50,
    "train steps whose rollouts and traces a local job keeps (plus every evaluation's)",
)
PRICE_PER_UNIT_HOUR = Setting(
    "OPD_PRICE_PER_UNIT_HOUR",
    POSITIVE,
    None,
    "money per training unit per hour, for `opd estimate` and the meter (`--price` wins)",
    default_text="none: no money shown",
)
DEPLOY_PRICE_PER_UNIT_HOUR = Setting(
    "OPD_DEPLOY_PRICE_PER_UNIT_HOUR",
    POSITIVE,
    None,
    "money per deployment unit per hour (ptu and mu plans), for a paid deploy's confirmation",
    default_text="none: no money shown",
)
NOTIFY_URL = Setting(
    "OPD_NOTIFY_URL",
    TEXT,
    None,
    "the webhook `opd watch` posts alerts to (`--notify-file` or `--notify` wins)",
    secret=True,
    default_text="none",
)
NOTIFY_SECRET = Setting(
    "OPD_NOTIFY_SECRET",
    TEXT,
    None,
    "a DingTalk or Feishu/Lark robot's signing secret (`--notify-secret-file` or `--notify-secret` wins)",
    secret=True,
    default_text="none",
)
OTLP_HEADERS = Setting(
    "OPD_OTLP_HEADERS",
    HEADERS,
    None,
    "the headers `opd serve --otlp-forward` sends its collector, e.g. its key "
    "(`--otlp-header-file` and `--otlp-header` add to them)",
    secret=True,
    default_text="none",
)
WATCH_DIR = Setting(
    "OPD_WATCH_DIR",
    PATH,
    None,
    "where detached watchers keep their pid files and logs",
    default_text=_user_cache("watchers"),
)
TENSORBOARD_DIR = Setting(
    "OPD_TENSORBOARD_DIR",
    PATH,
    Path("runs"),
    "where `opd report --to tensorboard` writes (one folder per job)",
)

# ---- set by opd-nb for the processes it starts ------------------------------------------------------


def _ours(name: str, kind: Kind[Any], meaning: str, *, secret: bool = False) -> Setting[Any]:
    """A variable opd-nb sets for a process it starts (a flag defaults to off, anything else to unset)."""
    return Setting(name, kind, False if kind is FLAG else None, meaning, who="opd-nb", secret=secret)


SERVER_PID = _ours(
    "OPD_SERVER_PID", PID, "the control plane that started a job's worker (it exits when that is gone)"
)
WATCH_PID = _ours("OPD_WATCH_PID", PID, "the process a forked child watches instead of its parent")
FUNCTION_PARENT = _ours(
    "OPD_FUNCTION_PARENT", PID, "the process that started a function server (it stops once that is gone)"
)
CLEAN_ROUTE = _ours("OPD_CLEAN_ROUTE", FLAG, "a function server also serves the playground's clean route")
SERVING_TOKEN = _ours(
    "OPD_SERVING_TOKEN", TEXT, "the token a deployment's serving process accepts", secret=True
)
OTLP_ENDPOINT = _ours("OPD_OTLP_ENDPOINT", TEXT, "where a job's function servers export their traces")
OTLP_TOKEN = _ours("OPD_OTLP_TOKEN", TEXT, "the job's token for that export", secret=True)
OTLP_FORWARD_HEADERS = _ours(
    "OPD_OTLP_FORWARD_HEADERS",
    JSON_OBJECT,
    "the collector's headers, handed from `opd serve` to its server",
    secret=True,
)
PROCESS_OWNER = _ours(
    "OPD_PROCESS_OWNER", TEXT, "the tag of a process tree `opd serve` started (data dir digest and owner)"
)
LOCAL_KEY_MARK = _ours(
    "OPD_NB_LOCAL_KEY", FLAG, "DASHSCOPE_API_KEY is the local placeholder (`use cloud` drops it)"
)

# ---- read by the shell scripts ----------------------------------------------------------------------
VENV = Setting(
    "OPD_VENV",
    PATH,
    Path(".venv"),
    "the virtual environment scripts/setup.sh makes and scripts/test.sh uses",
    who="scripts",
)
TORCH_INDEX = Setting(
    "OPD_TORCH_INDEX",
    TEXT,
    "https://download.pytorch.org/whl/cpu",
    "the index binder/postBuild installs the CPU torch wheel from",
    who="scripts",
)
SERVE_PORT = Setting(
    "OPD_SERVE_PORT", WHOLE_0, 8765, "the port binder/start starts the local control plane on", who="scripts"
)

# ---- the dashscope SDK's, which opd-nb reads too (opd_nb/workspace/connection.py: environment, then .env) --
DASHSCOPE_BASE_URL = Setting(
    "DASHSCOPE_HTTP_BASE_URL",
    TEXT,
    None,
    "the control plane the SDK and opd-nb talk to: a loopback URL (127.0.0.0/8, ::1, localhost) is the local "
    "plane, any other the cloud (your key goes there)",
    who="sdk",
    default_text=DEFAULT_CLOUD_API,
)
DASHSCOPE_API_KEY = Setting(
    "DASHSCOPE_API_KEY",
    TEXT,
    None,
    "your Bailian key: sent only to the cloud URL you configured or Bailian's documented hosts, never to a "
    "local plane (which gets OPD_SERVE_API_KEY, else the placeholder `local`)",
    who="sdk",
    secret=True,
    default_text="none",
)
FC_API_KEY = Setting(
    "FC_API_KEY",
    TEXT,
    None,
    "the SDK's key for function registration (else DASHSCOPE_API_KEY); a local submit sets it to the local key",
    who="sdk",
    secret=True,
    default_text="DASHSCOPE_API_KEY",
)

SETTINGS: tuple[Setting[Any], ...] = tuple(v for v in list(globals().values()) if isinstance(v, Setting))
BY_NAME: dict[str, Setting[Any]] = {s.name: s for s in SETTINGS}
WHO_TITLES: dict[Who, str] = {
    "you": "Set by you",
    "sdk": "Set by you for the dashscope SDK, and read by opd-nb too (environment, then the workspace's .env, then the working directory's)",
    "opd-nb": "Set by opd-nb for the processes it starts (listed so that none is a mystery; do not set them)",
    "scripts": "Read by the shell scripts",
}


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every declared variable that is set must parse: the first bad one is an :class:`OpdError`."""
    for setting in SETTINGS:
        setting.get(environ)


# ---- the README's table -----------------------------------------------------------------------------
BEGIN = "<!-- settings table: generated by `python -m opd_nb.settings --write`; do not edit by hand -->"
END = "<!-- end of settings table -->"


def table() -> str:
    """The README's table of every variable, grouped by who sets it."""
    lines = [BEGIN]
    for who, title in WHO_TITLES.items():
        lines += ["", f"*{title}*", "", "| Variable | Accepts | Default | Meaning |", "|---|---|---|---|"]
        for s in (s for s in SETTINGS if s.who == who):
            lines.append(f"| `{s.name}` | {s.kind.accepts} | {s.shown_default()} | {s.meaning} |")
    return "\n".join([*lines, "", END])


def with_table(readme: str) -> str:
    """`readme` with its marked block replaced by :func:`table` (an OpdError when the markers are missing)."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise OpdError(
            "the README has no settings table markers", fix=f"add the two lines {BEGIN!r} and {END!r}"
        )
    return readme[:start] + table() + readme[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    """``python -m opd_nb.settings [--write|--check] [README]``: print, rewrite or check the README's table."""
    args = sys.argv[1:] if argv is None else argv
    readme = Path(next((a for a in args if not a.startswith("--")), "README.md"))
    if "--write" in args or "--check" in args:
        text = readme.read_text(encoding="utf-8")
        fresh = with_table(text)
        if "--check" in args:
            print("up to date" if fresh == text else f"{readme}: the settings table is stale; run --write")
            return 0 if fresh == text else 1
        readme.write_text(fresh, encoding="utf-8")
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
