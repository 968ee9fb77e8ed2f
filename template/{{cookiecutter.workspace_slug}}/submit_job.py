#!/usr/bin/env python
"""Submit this workspace's OPD job with the dashscope SDK (to Bailian, or to a local `opd serve`).

    python submit_job.py --dry-run               # show the effective job, send nothing
    python submit_job.py                         # register functions, upload data, submit
    python submit_job.py --local --wait          # submit to http://127.0.0.1:8765/api/v1 and follow it
    python submit_job.py --no-reward             # pure distillation: functions=None

Needs only the standard library, PyYAML and dashscope>=2.0.2, so the workspace works without
opd-nb. The API key comes from DASHSCOPE_API_KEY or a .env file next to the config; it is never
printed. Exit codes: 0 submitted (with --wait: SUCCEEDED), 1 rejected or failed, 2 usage/config error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

LOCAL_URL = "http://127.0.0.1:8765/api/v1"
CLOUD_URL = "https://dashscope.aliyuncs.com/api/v1"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELED")


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
    parser.add_argument("--local", nargs="?", const=LOCAL_URL, metavar="URL",
                        help=f"target a local control plane (default URL {LOCAL_URL})")
    parser.add_argument("--dry-run", action="store_true", help="print the effective job and send nothing")
    parser.add_argument("--wait", action="store_true", help="follow the job until it ends")
    parser.add_argument("--poll", type=float, default=None, metavar="S",
                        help="seconds between status checks with --wait (default 2 local, 15 cloud)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the SDK's INFO logs")
    return parser.parse_args(argv)


def find_config(value: str) -> Path:
    """The config path as given (relative to the CWD), else relative to this script's directory."""
    for candidate in (Path(value), Path(__file__).resolve().parent / value):
        if candidate.is_file():
            return candidate.resolve()
    raise UsageError(f"config file {value!r} not found (run from the workspace or pass -c PATH)")


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a .env file (comments, blank lines and `export ` prefixes allowed)."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key.replace("_", "").isalnum():
            raise UsageError(f"{path}:{number}: expected KEY=VALUE (the value is not shown)")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def configure_env(args: argparse.Namespace, workspace: Path) -> str:
    """Set the environment the SDK reads at import time; returns where the API key came from."""
    source = "environment" if os.environ.get("DASHSCOPE_API_KEY") else None
    for key, value in read_dotenv(workspace / ".env").items():
        if key not in os.environ:
            os.environ[key] = value
            if key == "DASHSCOPE_API_KEY" and value:
                source = ".env"
    if args.local:
        os.environ["DASHSCOPE_HTTP_BASE_URL"] = args.local
        no_proxy = os.environ.get("NO_PROXY", "")
        os.environ["NO_PROXY"] = ",".join(filter(None, [no_proxy, "127.0.0.1", "localhost"]))
        if not os.environ.get("DASHSCOPE_API_KEY"):
            os.environ["DASHSCOPE_API_KEY"] = "local"  # the local server refuses an empty Bearer
            source = "placeholder 'local'"
    if not args.verbose:
        os.environ.setdefault("LOG_LEVEL", "warning")  # the SDK logs whole requests at INFO
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


def load_tuning(config: Path) -> Any:
    """The job as the SDK's own loader reads it (the same TuningModel that AgenticRL.init builds)."""
    from dashscope.finetune.reinforcement import TuningModel

    try:
        return TuningModel.load_from_yaml(str(config))
    except Exception as exc:
        raise UsageError(f"{config.name}: {sdk_error(exc)}") from None


def select_functions(tuning: Any, no_reward: bool) -> list | None:
    """The functions argument for run(); also trims the YAML's list, since run() ignores a falsy one."""
    functions = list(tuning.functions or [])
    if no_reward:
        functions = [f for f in functions if str(getattr(f.type, "value", f.type)) == "rollout"]
        tuning.functions = functions
    return functions or None  # pure distillation must send None, not []


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


def submit(tuning: Any, args: argparse.Namespace, functions: list | None) -> str:
    from dashscope.finetune.agentic_rl import AgenticRL

    try:
        client = AgenticRL()
    except Exception as exc:
        raise UsageError(f"API key: {sdk_error(exc)}") from None
    client.tuning = tuning
    print("registering functions, uploading datasets, submitting ...", file=sys.stderr)
    try:
        result = asyncio.run(client.run(model=args.model, functions=functions, job_name=args.job_name,
                                        teacher_model=args.teacher_model))
    except Exception as exc:
        raise SubmitError(f"submission failed: {sdk_error(exc)}") from None
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = find_config(args.config)
        workspace = config.parent
        os.chdir(workspace)  # the SDK resolves zipdir, classpath and file_name against the CWD
        key_source = configure_env(args, workspace)
        tuning = load_tuning(config)
        functions = select_functions(tuning, args.no_reward)
        job = effective_job(tuning, args, functions, key_source)
        if args.dry_run:
            print(json.dumps(job, indent=2, ensure_ascii=False, default=str))
            return 0
        if not os.environ.get("DASHSCOPE_API_KEY"):
            raise UsageError("no API key: set DASHSCOPE_API_KEY (or put it in .env next to the config), "
                             "or use --local for a local control plane")
        job_id = submit(tuning, args, functions)
        status = None
        if not args.json:
            print(f"job id: {job_id}")
        if args.wait:
            status = wait(job_id, args.poll or (2.0 if args.local else 15.0))
        if args.json:
            print(json.dumps({"job_id": job_id, "status": status, "target": job["target"]}))
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
