#!/usr/bin/env python
"""Submit this workspace's OPD job with the dashscope SDK (to Bailian, or to a local `opd serve`).

    python submit_job.py --dry-run               # show the effective job, send nothing
    python submit_job.py                         # register functions, upload data, submit
    python submit_job.py --local --wait          # submit to http://127.0.0.1:8765/api/v1 and follow it
    python submit_job.py --no-reward             # pure distillation: functions=None
    python submit_job.py --set learning_rate=2e-6   # one change (or training.hyper_parameters.learning_rate)
    python submit_job.py --fresh                 # register the functions again even if unchanged
    python submit_job.py --smoke 40 --yes        # a small first run: 40 sampled rows, one epoch, name -smoke
    python submit_job.py --yes                   # Bailian bills the job: a cloud submit needs --yes
    python submit_job.py --result-file out.json  # also write the result (JSON) to out.json, for a program

A cloud submit (no --local) needs --yes: without it, one line says what would start (student, teacher,
rows, epochs, steps, rollouts per step, resources) and nothing is sent. A cloud submit is sent once: its
job name carries a request id (NAME-rXXXXXXXXXX, unless --job-name holds one), and when the create's answer
is lost (no answer, a timeout, a 5xx) the newest jobs are searched for that id: found, it is reported as
started (with a note; the result's `answer_lost` says what was lost); not found, the script names the id,
says the start may or may not have happened and exits 1. It never sends the create again. When opd-nb is importable, a
submit and a dry run first run its preflight rules (`opd check`, on the config with its --set changes):
the warnings are printed and an error refuses (exit 2); --no-check skips that, and --dry-run adds
opd-nb's size estimate. `--set` takes a hyper-parameter or resource by name (n_epochs=2) or a dotted
key. A smoke run samples its rows (seeded) into new files under .opd/smoke/ and uploads them as new
datasets; data/ is never edited.

Registered functions are remembered in .opd/entities.json (per target, function name and type, with a
hash of exactly what the SDK would zip, plus requirements.txt). While that code is unchanged the next
submit passes the function's entity_id (rw-.../ro-...) and nothing is zipped or uploaded again; an
entity the control plane no longer knows is registered again once, automatically. The file holds ids
and hashes only (no secrets); it is git-ignored and left out of the function zip.

Needs only the standard library and requirements.txt (dashscope>=2.0.2, PyYAML, python-dotenv), so
the workspace works without opd-nb; a Python without them gets one line saying what to install. The API
key comes from DASHSCOPE_API_KEY or a .env file next to the config (read by python-dotenv, as opd-nb
reads it); it is never printed. Exit codes: 0 submitted (with --wait: SUCCEEDED), 1 rejected or failed
(or a lost answer whose job was not found), 2 usage/config error.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

STALE_CODES = ("FunctionNotFound",)  # what a control plane answers for an entity id it does not know
# What this script shares with opd-nb, generated from its one source (the hyper-parameter table and
# opd_nb.constants; a test keeps both equal): the keys OPD knows under training.hyper_parameters /
# training.resources (the service ignores any other key without a word, so `--set` refuses one instead of
# submitting a typo), the service's defaults of the sizes a smoke run reads, the version of the result file this
# script writes, the default URLs, the entity state's names (the same algorithm and file
# format as opd_nb.functions.entities: opd-nb's tests prove both hash alike), the SDK's zip facts, the smoke sizes.
# <generated from opd-nb's table and constants: python -m opd_nb.workspace.template_keys --write>
HYPER_PARAMETERS = ("algorithm", "kl_loss_coef", "learning_rate", "lr_scheduler_type", "lr_warmup_steps",
                    "n_epochs", "batch_size", "n_rollouts", "ppo_mini_batch_size", "max_length",
                    "max_prompt_length", "eval_steps", "save_steps", "save_strategy", "save_total_limit",
                    "opd_teacher_max_model_len", "opd_teacher_max_num_batched_tokens",
                    "opd_teacher_gpu_memory_utilization")
RESOURCES = ("charge_type", "mtu_spec_code", "mtu_capacity")
DEFAULTS = {"batch_size": 128, "n_epochs": 1, "n_rollouts": 8}  # the service's, when the config leaves them out
RESULT_PROTOCOL = 1
LOCAL_URL = "http://127.0.0.1:8765/api/v1"
CLOUD_URL = "https://dashscope.aliyuncs.com/api/v1"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELED")
STATE_DIR = ".opd"
STATE_FILE = "entities.json"
GENERATED_FILES = ("start.sh",)
START_SCRIPT_ENV = ("FC_PYPI_LIB", "FC_PYPI_REPO", "FC_SERVER_CLASSPATH", "FC_WORKERS_COUNT", "FC_LAYER_USED")
SMOKE_STEPS = 2
SMOKE_VALIDATION_ROWS = 4
SMOKE_SUFFIX = "-smoke"
REQUEST_ID_PREFIX = "r"
REQUEST_ID_HEX = 10
ZIP_EXCLUDES = (".git,.gitignore,.DS_Store,.vscode,.Python,.env,.venv,.idea,__pycache__,*.swp,*.egg,*.egg-in"
                "fo,*.pyc,*.md,*.log,*.tmp,*.bak,build,develop-eggs,.eggs,test,tests,tmp,temp,data,.opd,*.ip"
                "ynb,.ipynb_checkpoints,submit_job.py,config.yaml,config_*.yaml")
STATE_NOTE = ("Functions registered by submit_job.py, reused while the code is unchanged. No secrets. Delete"
              " this file (or pass --fresh) to register again.")
# </generated>
MAPPINGS = ("model", "training", "training.hyper_parameters", "training.resources")  # never a plain value
CONFIG_KEYS = ("name", "model", "teacher_model", "functions", "datasets", "training", "observability")  # the SDK's
TRAINING_KEYS = ("type", "hyper_parameters", "resources")
# Smoke runs (their sizes are in the generated block above).
SMOKE_SEED = 0
SMOKE_DIR = "smoke"  # under STATE_DIR
REQUIRED = (("dashscope", "dashscope"), ("yaml", "PyYAML"), ("dotenv", "python-dotenv"))  # requirements.txt


class UsageError(Exception):
    """A mistake the user can fix; printed as one line, exit code 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Submit this workspace's OPD job with the dashscope SDK.")
    parser.add_argument("-c", "--config", default="config.yaml", help="job YAML (default: config.yaml)")
    parser.add_argument("--model", help="student model id (overrides model.name)")
    parser.add_argument("--teacher-model", help="teacher model id (overrides teacher_model)")
    parser.add_argument("--job-name", help="job name (overrides name; the service appends -<8 hex>)")
    parser.add_argument("--no-reward", action="store_true",
                        help="submit without reward functions (pure distillation: functions=None)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                        help="change one config value for this submit only, e.g. "
                             "training.hyper_parameters.learning_rate=2e-6 (VALUE is JSON, else text; repeatable)")
    parser.add_argument("--fresh", action="store_true",
                        help="register every function again, even if its code is unchanged")
    parser.add_argument("--local", nargs="?", const="", metavar="URL",
                        help="target a local control plane (default: DASHSCOPE_HTTP_BASE_URL when it is on this "
                             f"machine, else {LOCAL_URL})")
    parser.add_argument("--dry-run", action="store_true", help="print the effective job and send nothing")
    parser.add_argument("--yes", action="store_true", help="start a paid job on Bailian (needed without --local)")
    parser.add_argument("--no-check", action="store_true", help="skip opd-nb's preflight rules (run before a "
                        "submit and a dry run when opd-nb is importable)")
    parser.add_argument("--preflight-done", action="store_true", help=argparse.SUPPRESS)  # opd ran them already
    parser.add_argument("--smoke", nargs="?", type=int, const=0, default=None, metavar="N",
                        help=f"a small first run: N sampled training rows (default {SMOKE_STEPS} steps' worth), "
                             f"one epoch, {SMOKE_VALIDATION_ROWS} validation rows, job name +{SMOKE_SUFFIX}")
    parser.add_argument("--wait", action="store_true", help="follow the job until it ends")
    parser.add_argument("--poll", type=float, default=None, metavar="S",
                        help="seconds between status checks with --wait (default 2 local, 15 cloud)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--result-file", metavar="PATH",
                        help="also write the result (the --json object) to PATH, for a program that runs this "
                             "script: what your code prints cannot be mistaken for it")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the SDK's INFO logs")
    return parser.parse_args(argv)


def require_packages() -> None:
    """One line, not a traceback, when this Python lacks what the script imports (checked, not imported:
    dashscope reads its base URL and key at import, so it is imported only after configure_env)."""
    from importlib.util import find_spec

    missing = [name for module, name in REQUIRED if find_spec(module) is None]
    if missing:
        raise UsageError(f"this Python ({sys.executable}) lacks {', '.join(missing)}: install the workspace's "
                         f"requirements with `{sys.executable} -m pip install -r requirements.txt`, or run the "
                         "script with the Python that has opd-nb (`opd submit .` does)")


def find_config(value: str) -> Path:
    """The config path as given (relative to the CWD), else relative to this script's directory."""
    for candidate in (Path(value), Path(__file__).resolve().parent / value):
        if candidate.is_file():
            return candidate.resolve()
    raise UsageError(f"config file {value!r} not found (run from the workspace or pass -c PATH)")


def read_dotenv(path: Path) -> dict[str, str]:
    """The .env next to the config, read by python-dotenv's grammar, exactly as opd-nb reads it
    (opd_nb.workspace.dotenv_file; a shared test keeps both equal): quotes, `export`, # comments, CRLF.

    A line python-dotenv cannot read, or a name with no `=`, is refused with its line number (never
    its text: it may hold a key), since what it was meant to set would be lost without a word."""
    if not path.is_file():
        return {}
    from dotenv.main import resolve_variables
    from dotenv.parser import parse_stream

    try:
        with open(path, encoding="utf-8") as stream:
            bindings = list(parse_stream(stream))
    except UnicodeDecodeError:
        raise UsageError(f"{path}:1: not UTF-8 text (save it as UTF-8)") from None
    for b in bindings:
        if b.error or (b.key is not None and b.value is None):
            raise UsageError(f"{path}:{b.original.line}: expected KEY=VALUE (the line is not shown; "
                             "`export KEY=VALUE`, quotes and # comments are fine)")
    pairs = ((b.key, b.value) for b in bindings if b.key is not None)
    return {k: v for k, v in resolve_variables(pairs, override=True).items() if v is not None}


def is_loopback(url: str) -> bool:
    """True for an http(s) URL on this machine (localhost, 127.0.0.0/8, ::1): opd_nb.loopback.is_loopback_url's
    rule, copied so that this script needs nothing but the SDK (opd-nb's tests run both on one corpus)."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower().removesuffix(".").split("%", 1)[0]
        if parts.scheme not in ("http", "https"):
            return False
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def local_key() -> str:
    """The key a local control plane gets: the server key (OPD_SERVE_API_KEY), else the placeholder. Never
    the cloud key: a local plane, or whatever listens on its port, must not see it."""
    return os.environ.get("OPD_SERVE_API_KEY") or "local"  # the local server refuses an empty Bearer


def configure_env(args: argparse.Namespace, workspace: Path) -> str:
    """Set the environment the SDK reads at import time; returns where the API key came from."""
    source = "environment" if os.environ.get("DASHSCOPE_API_KEY") else None
    for key, value in read_dotenv(workspace / ".env").items():
        if not os.environ.get(key):  # the environment wins, unless it is empty (as opd-nb's client reads it)
            os.environ[key] = value
            if key == "DASHSCOPE_API_KEY" and value:
                source = ".env"
    if args.local == "":  # --local without a URL: the local server the environment names, else the default
        named = os.environ.get("DASHSCOPE_HTTP_BASE_URL", "")
        args.local = named if is_loopback(named) else LOCAL_URL
    if args.local:
        os.environ["DASHSCOPE_HTTP_BASE_URL"] = args.local
        no_proxy = os.environ.get("NO_PROXY", "")
        os.environ["NO_PROXY"] = ",".join(filter(None, [no_proxy, "127.0.0.1", "localhost"]))
        key = local_key()  # also the SDK's function key (FC_API_KEY), which it would else take from the cloud's
        os.environ["DASHSCOPE_API_KEY"] = os.environ["FC_API_KEY"] = key
        source = "OPD_SERVE_API_KEY" if key == os.environ.get("OPD_SERVE_API_KEY") else "placeholder 'local'"
    if not args.verbose:
        os.environ.setdefault("LOG_LEVEL", "warning")  # the SDK logs whole requests at INFO
    # the SDK reads this at import: yours as written, else the workspace's list (notebooks, the config and
    # this script stay out of the function zip, so saving a notebook does not change the function)
    os.environ["FC_ZIP_EXCLUDE_PATTERNS"] = ",".join(zip_patterns())
    return source or "not set"


def sdk_error(exc: BaseException) -> str:
    """One line for an SDK exception: its [code] message and the root cause."""
    text = str(exc)
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    if root is not exc and str(root) not in text:
        text += f" (caused by {type(root).__name__}: {str(root).splitlines()[0] if str(root) else ''})"
    return text


def parse_sets(items: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` pairs as {full dotted key: value}: opd-nb's parser when it is importable (it also
    checks each value against the hyper-parameter table), else this script's own (`read_sets`)."""
    try:
        from opd_nb.errors import OpdError
        from opd_nb.spec.sets import parse_sets as opd_parse_sets
    except ImportError:
        return read_sets(items)
    try:
        return opd_parse_sets(items)
    except OpdError as exc:
        raise UsageError(f"--set {exc.message}" + (f" ({exc.fix})" if exc.fix else "")) from None


def read_sets(items: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` pairs: KEY is a dotted path into the YAML, or the bare name of a hyper-parameter or
    resource (n_epochs=2); VALUE is JSON (else plain text). The same keys as opd-nb's parser (a test keeps both
    equal on one corpus); without opd-nb the values are not checked against its table."""
    sets: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise UsageError(f"--set {item!r}: expected KEY=VALUE, e.g. learning_rate=2e-6 "
                             "(or training.hyper_parameters.learning_rate=2e-6)")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if "." not in key and key in HYPER_PARAMETERS + RESOURCES:
            key = f"training.{'hyper_parameters' if key in HYPER_PARAMETERS else 'resources'}.{key}"
        check_set_key(key, value)
        sets[key] = value
    return sets


def _near(name: str, known: tuple[str, ...]) -> str | None:
    import difflib

    near = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.6)
    return near[0] if near else None


def check_set_key(key: str, value: Any) -> None:
    """Refuse a `--set` the service would ignore (an unknown key) or the SDK cannot read (a mapping replaced)."""
    parts = key.split(".")
    if parts[0] not in CONFIG_KEYS:
        near = _near(parts[0], HYPER_PARAMETERS + RESOURCES) if len(parts) == 1 else _near(parts[0], CONFIG_KEYS)
        raise UsageError(f"--set {key}: unknown key `{parts[0]}`" + (f"; did you mean {near}?" if near else
                         f"; config keys: {', '.join(CONFIG_KEYS)}, or a hyper-parameter by name"))
    if parts[0] == "training" and len(parts) > 1 and parts[1] not in TRAINING_KEYS:
        raise UsageError(f"--set {key}: `training.{parts[1]}` is not a key of training "
                         f"(a hyper-parameter is written --set {parts[1]}=... or training.hyper_parameters.{parts[1]})")
    for section, known, other in (("training.hyper_parameters.", HYPER_PARAMETERS, RESOURCES),
                                  ("training.resources.", RESOURCES, HYPER_PARAMETERS)):
        if not key.startswith(section):
            continue
        name = key[len(section):]
        if name in known:
            break
        if name in other:
            where = "training.resources" if section.startswith("training.hyper") else "training.hyper_parameters"
            raise UsageError(f"--set {key}: `{name}` belongs under {where}, not {section[:-1]} "
                             f"(write --set {name}=...)")
        near = _near(name, known)
        hint = f"did you mean --set {near}=...?" if near else f"known keys: {', '.join(known)}"
        raise UsageError(f"--set {key}: unknown key `{name}`; the service would ignore it without a word ({hint})")
    if key in MAPPINGS and not isinstance(value, dict):
        example = "model.name=qwen3.5-9b" if key == "model" else f"{key}.<key>=VALUE"
        raise UsageError(f"--set {key}={json.dumps(value)}: `{key}` is a mapping in the config, not a single "
                         f"value; set one key inside it, e.g. --set {example}")


def apply_sets(data: dict, sets: dict[str, Any]) -> dict:
    """The YAML's data with each `--set` applied (missing mappings on the way are created)."""
    for key, value in sets.items():
        node = data
        *parents, leaf = key.split(".")
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                path = ".".join(parents[: i + 1])
                raise UsageError(f"--set {key}: `{path}` is {json.dumps(child)} in the config, not a mapping "
                                 f"(set `{path}` itself, or fix it in the YAML)")
            node = child
        if isinstance(node.get(leaf), dict) and not isinstance(value, dict):
            raise UsageError(f"--set {key}={json.dumps(value)}: `{key}` is a mapping in the config "
                             f"(keys: {', '.join(map(str, node[leaf]))}); set one key inside it, "
                             f"e.g. --set {key}.{next(iter(node[leaf]), 'key')}=VALUE")
        node[leaf] = value
    return data


def validation_text(exc: Exception) -> str:
    """A pydantic error as `field: problem` items, each once (the SDK's union types repeat them)."""
    cause: BaseException | None = exc
    while cause is not None and not callable(getattr(cause, "errors", None)):
        cause = cause.__cause__ or cause.__context__  # the SDK wraps pydantic's error in its own
    errors = getattr(cause, "errors", None)
    if not callable(errors):
        return sdk_error(exc)
    try:
        items = errors()
    except Exception:
        return sdk_error(exc)
    lines = []
    for err in items:
        loc = ".".join(str(p) for p in err.get("loc", ()) if not str(p).startswith(("function-", "tagged-")))
        got = json.dumps(err.get("input"), default=str)[:80]
        line = f"{loc or 'config'}: {err.get('msg', 'invalid')} (got {got})"
        if err.get("type") == "string_type" and isinstance(err.get("input"), int | float | bool):
            line += f"; --set VALUE is JSON, so quote text: --set '{loc}=\"{got}\"'"
        if line not in lines:
            lines.append(line)
    return "; ".join(lines) or sdk_error(exc)


def load_tuning(config: Path, sets: dict[str, Any] | None = None) -> Any:
    """The job as the SDK's own loader reads it (the same TuningModel that AgenticRL.init builds)."""
    from dashscope.finetune.reinforcement import TuningModel

    try:
        if not sets:
            return TuningModel.load_from_yaml(str(config))
        import yaml

        data = yaml.safe_load(config.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise UsageError(f"{config.name}: the config is not a mapping")
        return TuningModel.load_from_dict(apply_sets(data, sets))
    except UsageError:
        raise
    except Exception as exc:
        detail = validation_text(exc) if sets else sdk_error(exc)
        raise UsageError(f"{config.name}{' with --set' if sets else ''}: {detail}") from None


def select_functions(tuning: Any, no_reward: bool) -> list | None:
    """The functions argument for run(); also trims the YAML's list, since run() ignores a falsy one."""
    functions = list(tuning.functions or [])
    if no_reward:
        functions = [f for f in functions if str(getattr(f.type, "value", f.type)) == "rollout"]
        tuning.functions = functions
    return functions or None  # pure distillation must send None, not []


# ---------------------------------------------------------------- remembered entities

def fn_type(function: Any) -> str:
    return str(getattr(function.type, "value", function.type))


def zip_patterns() -> list[str]:
    """Your FC_ZIP_EXCLUDE_PATTERNS as written, else the workspace's; the state dir is always out."""
    raw = os.environ.get("FC_ZIP_EXCLUDE_PATTERNS")
    patterns = [p.strip() for p in (ZIP_EXCLUDES if raw is None else raw).split(",") if p.strip()]
    return patterns if STATE_DIR in patterns else [*patterns, STATE_DIR]


def zip_members(zipdir: Path, patterns: list[str]) -> list[str]:
    """The files (relative, sorted) the SDK's zip_dir puts in a function zip: same walk, same exclusions."""
    out = []
    for root, dirs, files in os.walk(zipdir, topdown=True):
        rel_root = os.path.relpath(root, start=zipdir)
        dirs[:] = [d for d in dirs if not any(
            fnmatch.fnmatch(d, p) or fnmatch.fnmatch(os.path.join(rel_root, d).replace("\\", "/"), p)
            for p in patterns)]
        out += [Path(os.path.relpath(os.path.join(root, f), start=zipdir)).as_posix()
                for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)]
    return sorted(out)


def file_digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).hexdigest().encode()


def sdk_version() -> str:
    try:
        from importlib.metadata import version

        return version("dashscope")
    except Exception:
        return ""


def code_hash(zipdir: Path, kind: str, classpath: Any, filepath: Any, classname: Any, requirements_path: Any,
              extra_files: Any, patterns: list[str]) -> str:
    """sha256 of what the SDK would zip and register for one function (start.sh by its inputs)."""
    header = {"type": kind, "classpath": classpath or "", "filepath": filepath or "", "classname": classname or "",
              "requirements_path": requirements_path or "", "extra_files": list(extra_files or []),
              "sdk": sdk_version(), "env": {k: os.environ.get(k, "") for k in START_SCRIPT_ENV}}
    digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode("utf-8") + b"\n")
    for rel in zip_members(zipdir, patterns):
        if rel not in GENERATED_FILES:
            digest.update(rel.encode("utf-8") + b"\0" + file_digest(zipdir / rel) + b"\n")
    for extra in extra_files or []:  # added at the zip's root unless a pattern excludes the name
        path = Path(extra)
        if path.is_file() and not any(fnmatch.fnmatch(path.name, p) for p in patterns):
            digest.update(b"extra\0" + path.name.encode("utf-8") + b"\0" + file_digest(path) + b"\n")
    layer = zipdir / "requirements.txt"  # the SDK builds the dependency layer from this file
    digest.update(b"requirements\0" + (layer.read_bytes() if layer.is_file() else b""))
    return "sha256:" + digest.hexdigest()


def function_hash(function: Any) -> str:
    fc = function.fcmodel
    return code_hash(Path(fc.zipdir or "./"), fn_type(function), fc.classpath, fc.filepath, fc.classname,
                     fc.requirements_path, fc.extra_files, zip_patterns())


def key_name(function: Any) -> str:
    """The name a function is remembered under (an unnamed one by its classpath)."""
    if function.name:
        return str(function.name)
    fc = function.fcmodel
    return f"unnamed:{(fc.classpath or f'{fc.filepath}:{fc.classname}') if fc else ''}"


def load_state(workspace: Path) -> dict:
    path = workspace / STATE_DIR / STATE_FILE
    empty = {"version": 1, "note": STATE_NOTE, "entities": []}
    if not path.is_file():
        return empty
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("entities"), list):
            raise ValueError("no list of entities")
        return data
    except (OSError, ValueError) as exc:
        print(f"note: ignoring unreadable {STATE_DIR}/{STATE_FILE} ({exc}); registering every function",
              file=sys.stderr)
        return empty


def save_state(workspace: Path, state: dict) -> None:
    """Write atomically; a read-only workspace only costs the reuse next time."""
    path = workspace / STATE_DIR / STATE_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        print(f"note: cannot write {STATE_DIR}/{STATE_FILE} ({exc}); the next submit registers again",
              file=sys.stderr)


def same_key(record: dict, target: str, name: str, kind: str) -> bool:
    return (record.get("target"), record.get("name"), record.get("type")) == (target, name, kind)


class Entity:
    """One function of this submit: its key, its code hash, and the entity it reuses (None: it registers)."""

    def __init__(self, function: Any, name: str, kind: str, code: str | None, reused: str | None, note: str):
        self.function, self.name, self.kind, self.code = function, name, kind, code
        self.reused, self.note, self.recorded = reused, note, False
        runtime = function.runtime
        self.own_layer = getattr(runtime, "layer_code", None) if runtime is not None else None
        self.own_weight = getattr(function, "reward_metric_weight", None)

    def reuse(self, record: dict) -> None:
        """Pass the remembered entity, with what its registration computed (layer, metric weights)."""
        from dashscope.finetune.reinforcement.common.model import FunctionComponentRuntime

        f = self.function
        f.entity_id = record["entity_id"]
        if record.get("layer_code") and not self.own_layer:
            if f.runtime is None:
                f.runtime = FunctionComponentRuntime()
            f.runtime.layer_code = record["layer_code"]
        if record.get("reward_metric_weight") and hasattr(f, "reward_metric_weight") and not self.own_weight:
            f.reward_metric_weight = record["reward_metric_weight"]

    def unreuse(self) -> None:
        f = self.function
        f.entity_id, self.reused = None, None
        if f.runtime is not None:
            f.runtime.layer_code = self.own_layer
        if hasattr(f, "reward_metric_weight"):
            f.reward_metric_weight = self.own_weight

    def summary(self) -> dict:
        return {"name": self.name, "type": self.kind, "entity_id": self.function.entity_id,
                "reused": bool(self.reused), "note": self.note}


def plan_entities(functions: list, workspace: Path, target: str, fresh: bool) -> list[Entity]:
    """Reuse each function's remembered entity while its code is unchanged; say why not otherwise."""
    state = load_state(workspace)
    plan = []
    for f in functions:
        name, kind = key_name(f), fn_type(f)
        if f.entity_id:  # set in the config: the user manages it
            plan.append(Entity(f, name, kind, None, f.entity_id, f"using {name} ({f.entity_id}) from the config"))
            continue
        code = function_hash(f)
        record = next((r for r in state["entities"] if same_key(r, target, name, kind)), None)
        if fresh:
            note = f"registering {name}: --fresh"
        elif record is None:
            note = f"registering {name}: new on {target} (no earlier registration to reuse)"
        elif record.get("code_hash") != code or not record.get("entity_id"):
            note = f"registering {name}: code changed since {record.get('entity_id')} was registered"
        else:
            entity = Entity(f, name, kind, code, record["entity_id"], "")
            entity.note = f"reusing {name} ({record['entity_id']}), code unchanged"
            entity.reuse(record)
            plan.append(entity)
            continue
        plan.append(Entity(f, name, kind, code, None, note))
    return plan


def remember(plan: list[Entity], workspace: Path, target: str) -> None:
    """Record the entity ids the SDK just returned (also after a failed submission: they exist now)."""
    new = [e for e in plan if e.code and not e.reused and not e.recorded and e.function.entity_id]
    if not new:
        return
    state = load_state(workspace)
    for e in new:
        runtime = e.function.runtime
        record = {"target": target, "name": e.name, "type": e.kind, "code_hash": e.code,
                  "entity_id": e.function.entity_id,
                  "layer_code": getattr(runtime, "layer_code", None) if runtime is not None else None,
                  "reward_metric_weight": None if e.own_weight else getattr(e.function, "reward_metric_weight", None),
                  "registered_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        state["entities"] = [r for r in state["entities"] if not same_key(r, target, e.name, e.kind)] + [record]
        e.recorded = True
        print(f"registered {e.name} ({e.function.entity_id}), remembered in {STATE_DIR}/{STATE_FILE}",
              file=sys.stderr)
    save_state(workspace, state)


def stale_entities(plan: list[Entity], result: Any) -> list[Entity]:
    """The reused entities a rejected submission says the control plane does not know."""
    reused = [e for e in plan if e.reused and e.code]
    if not reused or result is None or getattr(result, "status_code", None) == 200:
        return []
    text = f"{getattr(result, 'code', '') or ''} {getattr(result, 'message', '') or ''}"
    named = [e for e in reused if e.reused in text]
    if named:
        return named
    return reused if getattr(result, "code", None) in STALE_CODES else []


def forget_stale(stale: list[Entity], workspace: Path, target: str) -> None:
    state = load_state(workspace)
    for e in stale:
        print(f"note: the control plane no longer knows {e.reused} ({e.name}); registering it again",
              file=sys.stderr)
        e.note = f"registered {e.name} again: the control plane no longer knew {e.reused}"
        state["entities"] = [r for r in state["entities"] if not same_key(r, target, e.name, e.kind)]
        e.unreuse()
    save_state(workspace, state)


# ---------------------------------------------------------------- before a paid start

def jsonl_rows(path: Path) -> list[str]:
    """The non-blank lines of a JSONL file (one row each)."""
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def sample_file(source: Path, n: int, dest: Path) -> int:
    """Write a seeded sample of `n` rows of `source` (in their order) to `dest`; returns the rows written."""
    import random

    rows = jsonl_rows(source)
    keep = sorted(random.Random(SMOKE_SEED).sample(range(len(rows)), min(n, len(rows))))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(rows[i] + "\n" for i in keep), encoding="utf-8")
    return len(keep)


def apply_smoke(tuning: Any, args: argparse.Namespace, workspace: Path) -> None:
    """Point the job at sampled copies of its files, one epoch, name +-smoke; data/ itself is never touched."""
    hp = dict(tuning.training.hyper_parameters or {})
    batch = int(hp.get("batch_size") or DEFAULTS["batch_size"])
    for dataset in tuning.datasets:
        kind = str(getattr(dataset.type, "value", dataset.type))
        if not dataset.file_name or kind not in ("training", "validation"):
            continue
        source = Path(dataset.file_name)
        if not source.is_file():
            raise UsageError(f"--smoke: {dataset.file_name} is not a local file, so it cannot be sampled")
        want = (args.smoke or SMOKE_STEPS * batch) if kind == "training" else SMOKE_VALIDATION_ROWS
        dest = Path(STATE_DIR) / SMOKE_DIR / f"{kind}-{source.stem}-{want}.jsonl"
        got = sample_file(source, want, dest)
        print(f"smoke run: {got} {kind} row(s) sampled from {source} into {dest}", file=sys.stderr)
        dataset.file_name = dest.as_posix()
    hp["n_epochs"] = 1
    tuning.training.hyper_parameters = hp
    args.job_name = (args.job_name or tuning.name) + SMOKE_SUFFIX


def start_line(job: dict) -> str:
    """One line on what would start (steps = ceil(rows / batch_size) x n_epochs, as opd estimate counts)."""
    import math

    hp, res = job["hyper_parameters"] or {}, job["resources"] or {}
    rows = 0
    for d in job["training_datasets"]:
        path = Path(d.get("file_name") or "")
        if not d.get("file_name") or not path.is_file():
            rows = None
            break
        rows += len(jsonl_rows(path))
    batch, epochs, n = (int(hp.get(k) or DEFAULTS[k]) for k in ("batch_size", "n_epochs", "n_rollouts"))
    steps = "?" if rows is None else math.ceil(rows / batch) * epochs
    return (f"{job['job_name']}: student {job['model']}, teacher {job['teacher_model'] or 'none'}, "
            f"{'?' if rows is None else rows} rows x {epochs} epoch(s) = {steps} steps, {batch * n} rollouts/step, "
            f"resources {res.get('mtu_spec_code', '?')} x {res.get('mtu_capacity', '?')}")


def preflight(config: Path, args: argparse.Namespace, sets: dict[str, Any]) -> None:
    """opd-nb's preflight rules (`opd check`) for this target, on the config as it would be sent (with
    --set, --model, --teacher-model, --job-name), when opd-nb is importable: its warnings are printed
    (a dry run prints its notes too) and an error refuses the submit or the dry run (exit 2)."""
    if args.preflight_done:
        return  # opd ran the same rules before it started this script, and showed their findings
    if args.no_check:
        print("note: preflight skipped (--no-check)", file=sys.stderr)
        return
    try:
        from opd_nb.checks import check
    except ImportError:
        print("note: opd-nb is not installed, so no preflight rules ran (pip install opd-nb)", file=sys.stderr)
        return
    run_args = {"model": args.model, "teacher_model": args.teacher_model, "job_name": args.job_name}
    report = check(config.parent, "local" if args.local else "cloud", config=config.name, sets=sets,
                   base_url=args.local or None, run_args=run_args)
    shown = [f for f in report.findings if not (args.dry_run and f.rule == "env.no-api-key")]  # nothing is sent
    errors = [f for f in shown if f.severity == "error"]
    for f in shown:
        if f.severity == "warning" or args.dry_run and f.severity == "info":
            print(f"preflight {f}", file=sys.stderr)
    if errors:
        lines = "\n".join(f"  {f}" for f in errors)
        raise UsageError(f"preflight found {len(errors)} error(s); nothing was sent:\n{lines}\n"
                         "fix them (opd check), or pass --no-check to skip the gate")


def size_estimate(config: Path, args: argparse.Namespace, sets: dict[str, Any]) -> dict | None:
    """opd-nb's `opd estimate` of this job, when opd-nb is importable (else None)."""
    try:
        from opd_nb.paid.estimate import estimate
    except ImportError:
        return None
    try:
        return estimate(config.parent, config=config.name, sets=sets, smoke=args.smoke, model=args.model,
                        teacher_model=args.teacher_model, job_name=args.job_name,
                        no_reward=args.no_reward).to_payload()
    except Exception as exc:  # an estimate never stops a dry run
        return {"error": str(exc)}


def effective_job(tuning: Any, args: argparse.Namespace, functions: list | None, key_source: str) -> dict:
    """What run() will submit, after the SDK's precedence (run() arguments > YAML > defaults)."""
    teacher = args.teacher_model or tuning.teacher_model
    if not teacher and str(getattr(tuning.training.type, "value", tuning.training.type)) == "pg_opd":
        raise UsageError("teacher_model is required for training.type pg_opd (set it or pass --teacher-model)")
    datasets = [{k: v for k, v in d.model_dump(mode="json").items() if v not in (None, "", [], {})}
                for d in tuning.datasets]

    def describe(f: Any) -> dict:
        info = {"type": str(getattr(f.type, "value", f.type)), "name": f.name, "weight": getattr(f, "weight", None),
                "timeout": f.timeout, "classpath": f.fcmodel.classpath if f.fcmodel else None,
                "zipdir": f.fcmodel.zipdir if f.fcmodel else None,
                "runtime": f.runtime.model_dump(exclude_none=True) if f.runtime else None}
        return {k: v for k, v in info.items() if v is not None}

    return {
        "target": os.environ.get("DASHSCOPE_HTTP_BASE_URL", CLOUD_URL),
        "api_key": key_source if os.environ.get("DASHSCOPE_API_KEY") else "not set",
        "job_name": f"{args.job_name or tuning.name}-<8 hex>",
        "model": args.model or tuning.model.name,
        "teacher_model": teacher,
        "training_type": "pg_opd" if teacher else str(getattr(tuning.training.type, "value", tuning.training.type)),
        "training_datasets": [d for d in datasets if d.get("type") == "training"],
        "validation_datasets": [d for d in datasets if d.get("type") == "validation"],
        "functions": [describe(f) for f in functions] if functions else None,
        "hyper_parameters": tuning.training.hyper_parameters,
        "resources": tuning.training.resources,
    }


def run_once(client: Any, args: argparse.Namespace, functions: list | None, plan: list[Entity],
             workspace: Path, target: str) -> Any:
    """One `run()`: register what is not reused, upload the datasets, submit; remember new entities."""
    steps = "registering functions, " if any(not e.reused for e in plan) else ""
    print(f"{steps}uploading datasets, submitting ...", file=sys.stderr)
    try:
        result = asyncio.run(client.run(model=args.model, functions=functions, job_name=args.job_name,
                                        teacher_model=args.teacher_model))
    except Exception as exc:
        if create_may_have_run(exc):
            raise AnswerLost(f"no answer to the create: {sdk_error(exc)}") from None
        raise SubmitError(f"submission failed: {sdk_error(exc)}") from None
    finally:
        remember(plan, workspace, target)
    status = getattr(result, "status_code", None)
    if isinstance(status, int) and status >= 500:  # the host may have started it before it failed to answer
        raise AnswerLost(f"HTTP {status}, code {getattr(result, 'code', None) or 'unknown'}: "
                         f"{getattr(result, 'message', None) or 'no message'}")
    return result


def submit(tuning: Any, args: argparse.Namespace, functions: list | None, plan: list[Entity],
           workspace: Path, target: str, rid: str | None) -> tuple[str, str | None]:
    """(job id, what was lost: None when the create answered). A paid start (`rid`: its request id) whose
    answer was lost is found by that id, never sent again."""
    try:
        return submit_job(tuning, args, functions, plan, workspace, target), None
    except AnswerLost as exc:
        if rid is None:  # a local plane bills nothing: the failure stands as it is
            raise SubmitError(f"submission failed: {exc}") from None
        return recover_lost(exc, rid), str(exc)


def submit_job(tuning: Any, args: argparse.Namespace, functions: list | None, plan: list[Entity],
               workspace: Path, target: str) -> str:
    from dashscope.finetune.agentic_rl import AgenticRL

    try:
        client = AgenticRL()
    except Exception as exc:
        raise UsageError(f"API key: {sdk_error(exc)}") from None
    client.tuning = tuning
    for entity in plan:
        print(entity.note, file=sys.stderr)
    result = run_once(client, args, functions, plan, workspace, target)
    # Each stale entity is registered once more, automatically. The service names one unknown entity
    # per refusal (a 4xx: nothing started), so this repeats while it names one not yet re-registered; any
    # other refusal stands. A create whose answer was lost is never sent again (run_once raises AnswerLost).
    retried: set[str] = set()
    while stale := [e for e in stale_entities(plan, result) if e.name not in retried]:
        retried.update(e.name for e in stale)
        forget_stale(stale, workspace, target)
        result = run_once(client, args, functions, plan, workspace, target)
    output = getattr(result, "output", None)
    job_id = getattr(output, "job_id", None) if output is not None else None
    if getattr(result, "status_code", None) != 200 or not job_id:
        code = getattr(result, "code", None) or "unknown"
        message = getattr(result, "message", None) or "no message"
        raise SubmitError(f"the service rejected the job (HTTP {getattr(result, 'status_code', '?')}, "
                          f"code {code}): {message}")
    return job_id


class SubmitError(Exception):
    """The SDK or the service refused the job (exit code 1)."""


class AnswerLost(Exception):
    """The create was sent and its answer lost (no answer, a timeout, a 5xx): it may have started a paid
    job, so it is looked for by its request id and never sent again."""


def create_may_have_run(exc: BaseException) -> bool:
    """Whether a failed `run()` may have carried out the create: the SDK wraps what the create's POST
    raised as error 3005 ("Job submission failed") with the cause chained; a network error there
    (requests' ConnectionError, Timeout, a cut-off body) leaves open whether the host started the job.
    Registering functions and uploading data fail with other codes: nothing billed was sent."""
    import requests

    if getattr(exc, "error_code", None) != 3005:
        return False
    cause = exc.__cause__
    while cause is not None and not isinstance(cause, requests.RequestException):
        cause = cause.__cause__
    return cause is not None


def new_request_id() -> str:
    """A paid start's request id (opd_nb.paid.consent.request_id's format: prefix + hex)."""
    import secrets

    return REQUEST_ID_PREFIX + secrets.token_hex(REQUEST_ID_HEX)[:REQUEST_ID_HEX]


def carried_request_id(job_name: str | None) -> str | None:
    """The request id a job name already carries (`opd submit` puts one in --job-name), else None."""
    import re

    hexed = "[0-9a-f]" * REQUEST_ID_HEX  # spelled out: this file is rendered by a template engine
    found = re.search(f"-({re.escape(REQUEST_ID_PREFIX)}{hexed})(?:-|$)", job_name or "")
    return found.group(1) if found else None


def with_request_id(args: argparse.Namespace, tuning: Any) -> str:
    """The request id of this paid start; the job name it submits carries it (NAME-rid, the service adds
    -<8 hex>), unless --job-name already holds one."""
    name = args.job_name or tuning.name
    rid = carried_request_id(name)
    if rid is None:
        rid = new_request_id()
        args.job_name = f"{name}-{rid}"
    return rid


def find_started(rid: str) -> str | None:
    """The id of the job whose name holds request id `rid`, among the newest 100 (None: none, or the
    list could not be read)."""
    from dashscope.finetune.agentic_rl import AgenticRL

    try:
        listing = AgenticRL.list(page_no=1, page_size=100)
    except Exception:
        return None
    if getattr(listing, "status_code", None) != 200:
        return None
    jobs = getattr(getattr(listing, "output", None), "jobs", None) or []
    return next((j.job_id for j in jobs if f"-{rid}-" in (getattr(j, "job_name", None) or "")), None)


def recover_lost(exc: AnswerLost, rid: str) -> str:
    """After a lost answer: the job the create started (found by its request id), else a SubmitError that
    says the start may or may not have happened; never a second create."""
    job_id = find_started(rid)
    if job_id is None:
        raise SubmitError(
            f"the answer to this start was lost ({exc}): it may or may not have started a job, and it was not "
            f"sent again. Its request id is {rid} (in the job name). Look for it before starting again: "
            f"`opd jobs --cloud`, or the Bailian console's job list (a job named ...-{rid}-...)")
    print(f"note: the answer to this start was lost ({exc}); the plane shows what it started: nothing was "
          f"sent twice (request id {rid}, job {job_id})", file=sys.stderr)
    return job_id


def wait(job_id: str, poll_s: float) -> str:
    """Poll AgenticRL.get until a terminal state, printing each status change."""
    from dashscope.finetune.agentic_rl import AgenticRL

    last, failures = None, 0
    while True:
        status, problem = None, None
        try:
            result = AgenticRL.get(job_id)
            if result.status_code == 200:
                status = getattr(result.output, "status", None)
            else:
                problem = f"HTTP {result.status_code} {result.code}: {result.message}"
        except Exception as exc:  # network hiccup: retry a few times before giving up
            problem = sdk_error(exc)
        failures = failures + 1 if problem else 0
        if failures >= 5:
            raise SubmitError(f"cannot read job {job_id}: {problem}")
        if status and status != last:
            print(f"{time.strftime('%H:%M:%S')} {job_id} {status}", file=sys.stderr, flush=True)
            last = status
        if status in TERMINAL:
            return status
        time.sleep(poll_s)


def write_result(path: Path, result: dict) -> None:
    """The result as JSON at `path`, whole or not at all (a reader never sees half a file)."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result_file = Path(args.result_file).resolve() if args.result_file else None  # before the chdir below
    try:
        require_packages()
        config = find_config(args.config)
        workspace = config.parent
        os.chdir(workspace)  # the SDK resolves zipdir, classpath and file_name against the CWD
        key_source = configure_env(args, workspace)
        sets = parse_sets(args.sets)
        tuning = load_tuning(config, sets)
        estimate_base = args.job_name
        if args.smoke is not None:
            apply_smoke(tuning, args, workspace)
        functions = select_functions(tuning, args.no_reward)
        job = effective_job(tuning, args, functions, key_source)
        target = job["target"].rstrip("/")
        plan = plan_entities(functions or [], workspace, target, args.fresh)
        if args.dry_run or os.environ.get("DASHSCOPE_API_KEY"):
            preflight(config, args, sets)  # before a dry run's job is shown, and before anything is sent
        if args.dry_run:
            if sets:
                job["set"] = sets
            job["registrations"] = [e.note for e in plan]
            args.job_name = estimate_base
            job["estimate"] = size_estimate(config, args, sets)
            print(json.dumps(job, indent=2, ensure_ascii=False, default=str))
            return 0
        if not os.environ.get("DASHSCOPE_API_KEY"):
            raise UsageError("no API key: set DASHSCOPE_API_KEY (or put it in .env next to the config), "
                             "or use --local for a local control plane")
        if not args.local:
            if not args.yes:
                print(f"not sent: Bailian bills this job, so it needs --yes: {start_line(job)}", file=sys.stderr)
                return 1
        rid = None if args.local else with_request_id(args, tuning)  # a paid start is sent once
        job_id, lost = submit(tuning, args, functions, plan, workspace, target, rid)
        status = None
        if not args.json:
            print(f"job id: {job_id}")
        if args.wait:
            status = wait(job_id, args.poll or (2.0 if args.local else 15.0))
        result = {"protocol": RESULT_PROTOCOL, "job_id": job_id, "status": status, "target": job["target"],
                  "functions": [e.summary() for e in plan], "request_id": rid, "answer_lost": lost}
        if result_file is not None:
            write_result(result_file, result)
        if args.json:
            print(json.dumps(result))
        elif status:
            print(f"final status: {status}")
        return 0 if status in (None, "SUCCEEDED") else 1
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SubmitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted (a submitted job keeps running; cancel it with the SDK or `opd cancel`)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
