"""Submit a workspace's job through the dashscope SDK, in a subprocess.

What users run is what we run: the workspace's own ``submit_job.py`` (the template ships it), or,
for a workspace without one, an equivalent minimal SDK runner. A subprocess is needed because the
SDK reads its base URL and key at import time, so one Python process cannot target two control
planes. The key travels only in the child's environment; it is never printed.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, JsonValue, PrivateAttr

from opd_nb.client.jobs import Job, JobClient
from opd_nb.client.target import Target, require_key, resolve_target
from opd_nb.constants import SUBMIT_RESULT_PROTOCOL
from opd_nb.errors import OpdError
from opd_nb.findings import Finding
from opd_nb.paid.consent import is_paid, lost_note
from opd_nb.paid.consent import request_id as new_request_id
from opd_nb.results import ResultMixin
from opd_nb.wire.submit_result import read_script_result

_RUNNER = r"""
import asyncio, json, os, sys
import yaml
args = json.loads(sys.argv[1])
from dashscope.finetune.agentic_rl import AgenticRL
kwargs = {}
if args.get("no_reward"):
    data = yaml.safe_load(open(args["config"], encoding="utf-8")) or {}
    kwargs["functions"] = [f for f in data.get("functions") or [] if (f or {}).get("type", "rollout") == "rollout"]
rl = AgenticRL().init(config_path=args["config"], **kwargs)
res = asyncio.run(rl.run(model=args.get("model"), job_name=args.get("job_name"),
                         teacher_model=args.get("teacher_model")))
out = getattr(res, "output", None)
job_id = getattr(out, "job_id", None) if out is not None and res.status_code == 200 else None
with open(args["result_file"], "w", encoding="utf-8") as f:
    json.dump({"protocol": args["protocol"], "job_id": job_id, "status_code": res.status_code, "code": getattr(res, "code", None),
               "message": getattr(res, "message", None)}, f)
sys.exit(0 if job_id else 1)
"""
RESULT_FLAG = "--result-file"  # submit_job.py writes its result (JSON) there; its stdout is the user's
PREFLIGHT_DONE_FLAG = "--preflight-done"  # tells submit_job.py the gate already ran in opd (not twice)
LEGACY_NOTE = (
    "this workspace's submit_job.py predates --result-file, so its result was read from its printed "
    "output (a print of your own can break that): copy submit_job.py from a new workspace (`opd new`)"
)


class SubmitResult(ResultMixin, BaseModel):
    job_id: str
    job: Job | None = None
    target_kind: str
    base_url: str
    workspace: str
    runner: str  # "submit_job.py" or "sdk"
    log_tail: list[str] = []
    functions: list[dict[str, Any]] = []  # submit_job.py's [{name, type, entity_id, reused, note}]
    notes: list[str] = []  # what the submit skipped or changed (--no-check, a smoke run's sample)
    # The client that read the job back, for whoever follows the job next (the notebook's monitor):
    # one client, one connection pool, per submit. Private: never part of the result's JSON.
    _client: JobClient | None = PrivateAttr(default=None)

    @property
    def client(self) -> JobClient | None:
        return self._client

    def headline(self, *, status: bool = True) -> str:
        """The submit in one line; `status`: with the job's status as the submit read it back (a line
        that stays on screen while the job moves on, like the monitor's notes, leaves it out)."""
        said = f" ({self.job.status if self.job else 'submitted'})" if status else ""
        return f"submitted {self.job_id}{said} to {self.target_kind} {self.base_url}"

    def note_lines(self) -> list[str]:
        """What the submit skipped or changed, then each function's note (reused or registered)."""
        return [*self.notes, *(str(f["note"]) for f in self.functions if f.get("note"))]

    def __str__(self) -> str:
        return "\n".join([self.headline(), *self.note_lines()])

    def _repr_html_(self) -> str:
        status = self.job.status if self.job else "submitted"
        notes = "".join(f"<br><small>{html.escape(n)}</small>" for n in self.note_lines())
        return (
            f"<div>submitted <code>{html.escape(self.job_id)}</code> ({html.escape(status)}) to "
            f"{self.target_kind} <code>{html.escape(self.base_url)}</code>{notes}</div>"
        )


class DryRun(ResultMixin, BaseModel):
    """What `opd submit --dry-run` prints: the preflight's findings, then the workspace's
    submit_job.py --dry-run; nothing sent. A dry run with a preflight error is an error itself."""

    workspace: str
    target_kind: str
    base_url: str
    job: dict[str, Any]  # the effective job, as submit_job.py computes it (the key only as its source)
    findings: list[Finding] = []  # the preflight's warnings and notes (empty with --no-check)
    checked: bool = True  # False: --no-check

    def to_payload(self) -> dict[str, Any]:
        return {**self.job, "preflight": [f.model_dump() for f in self.findings] if self.checked else None}

    def _head(self) -> str:
        check = (
            "preflight skipped (--no-check)"
            if not self.checked
            else f"preflight: {len(self.findings)} finding(s), no error"
        )
        return f"dry run on {self.target_kind} {self.base_url}: nothing sent; {check}"

    def __str__(self) -> str:
        found = "".join(f"{f}\n" for f in self.findings)
        return f"{found}{self._head()}\n" + json.dumps(self.job, indent=2, ensure_ascii=False, default=str)

    def _repr_html_(self) -> str:
        body = html.escape(json.dumps(self.job, indent=2, ensure_ascii=False, default=str))
        found = "".join(f"<li><b>{html.escape(f.severity)}</b> <code>{html.escape(f.where)}</code> "
                        f"{html.escape(f.message)}</li>" for f in self.findings)  # fmt: skip
        return f"<div>{html.escape(self._head())}<ul>{found}</ul><pre>{body}</pre></div>"


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` items, checked (:func:`opd_nb.spec.sets.parse_sets`, the one grammar)."""
    from opd_nb.spec.sets import parse_sets as parse

    return parse(items)


def _script_flags(sets: Mapping[str, Any] | None, fresh: bool, smoke: int | None = None) -> list[str]:
    """submit_job.py's `--set KEY=JSON` (one per value), `--fresh` and `--smoke N`."""
    flags = [arg for key, value in (sets or {}).items() for arg in ("--set", f"{key}={json.dumps(value)}")]
    if smoke is not None:
        flags += ["--smoke", str(smoke)]
    return [*flags, "--fresh"] if fresh else flags


def _script_knows(ws: Path, flag: str) -> bool:
    """Whether the workspace's submit_job.py has `flag` (workspaces made by older templates lack some)."""
    script = ws / "submit_job.py"
    return script.is_file() and f'"{flag}"' in script.read_text(encoding="utf-8", errors="replace")


def _checked_flag(ws: Path, no_check: bool) -> list[str]:
    """What submit_job.py is told about the preflight: it ran here (`--preflight-done`), or the user skipped
    it (`--no-check`); a script older than `--preflight-done` only knows `--no-check`."""
    if not no_check and _script_knows(ws, PREFLIGHT_DONE_FLAG):
        return [PREFLIGHT_DONE_FLAG]
    return ["--no-check"] if _script_knows(ws, "--no-check") else []


def _preflight(ws: Path, target: Target, config: str, overrides: Mapping[str, Any], **how: Any) -> Any:
    """The gate on the config as it would be sent, its `--set` changes and run() arguments included
    (None with `no_check`): an error refuses, before anything."""
    from opd_nb.paid.gate import gate

    if how["no_check"]:
        return None
    run_args = {k: overrides.get(k) for k in ("model", "teacher_model", "job_name")}
    return gate(
        ws, target.kind, base_url=target.base_url, config=config, sets=how["sets"], run_args=run_args,
        dry_run=how.get("dry_run", False),
    )  # fmt: skip


def _before_start(
    ws: Path, target: Target, config: str, overrides: Mapping[str, Any], **how: Any
) -> tuple[list[str], list[str]]:
    """The gate (unless `no_check`) and, on Bailian, the consent: (notes, flags for submit_job.py).

    Every warning of the gate goes to `how["on_note"]` before anything is sent (and into the notes); a
    paid start without `yes` shows them in its refusal. submit_job.py gets `--preflight-done` (or
    `--no-check`) and `--yes` for what was decided here, so it does neither twice, and the `sets`,
    `fresh` and `smoke` flags (refused here where the workspace's script lacks them).
    """
    from opd_nb.paid.consent import is_paid, require_consent
    from opd_nb.paid.estimate import estimate  # here, not at import: `%load_ext opd_nb` stays light
    from opd_nb.paid.gate import warning_lines
    from opd_nb.paid.probe_record import probe_hint

    done = how.get("preflight_done", False)  # the caller ran the gate (a sweep, once per value)
    report = _preflight(ws, target, config, overrides, sets=how["sets"], no_check=how["no_check"] or done)
    notes = ["preflight skipped (--no-check)"] if report is None and not done else []
    warnings = warning_lines(report) if report is not None else []
    if not done and (hint := probe_hint(ws, config)):
        warnings = [hint, *warnings]  # shown as the gate's warnings are, on every surface
    if is_paid(target.kind):
        size = estimate(ws, config=config, sets=dict(how["sets"] or {}), smoke=how["smoke"], **overrides)
        require_consent(target.kind, how["yes"], size.start_line(), warnings=warnings)
    for line in warnings:
        if how.get("on_note") is not None:
            how["on_note"](line)
        notes.append(line.split("\n", 1)[0])
    flags = _checked_flag(ws, how["no_check"] and not done)
    if is_paid(target.kind) and _script_knows(ws, "--yes"):
        flags = ["--yes", *flags]
    if how["smoke"] is not None and not _script_knows(ws, "--smoke"):
        raise OpdError(
            "this workspace's submit_job.py predates --smoke",
            where=str(ws / "submit_job.py"),
            fix="copy submit_job.py from a new workspace (`opd new`)",
        )
    if (how["fresh"] or how["sets"]) and not (ws / "submit_job.py").is_file():
        raise OpdError(
            f"{ws} has no submit_job.py, which --fresh and --set need",
            fix="copy submit_job.py from a new workspace (`opd new`)",
        )
    return notes, [*flags, *_script_flags(how["sets"], how["fresh"], how["smoke"])]


def _prepare(
    workspace: str | Path, target: Target | None, config: str, *, need_key: bool = True
) -> tuple[Path, str, Target, dict[str, str]]:
    """(workspace, config name, target, the child's environment): the key travels only there.
    `workspace` is the folder or its config file."""
    from opd_nb.spec.job import require_config_file, workspace_config

    ws, config = workspace_config(workspace, config)
    ws = ws.resolve()
    require_config_file(ws, config)
    target = target or resolve_target(workspace=ws)
    if need_key:
        require_key(target)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    env.update(target.env())
    env["NO_PROXY"] = ",".join(filter(None, [env.get("NO_PROXY", ""), "127.0.0.1", "localhost"]))
    env.setdefault("LOG_LEVEL", "warning")
    return ws, config, target, env


def _script_command(
    ws: Path, cfg: Path, target: Target, overrides: Mapping[str, Any], extra: Sequence[str]
) -> list[str]:
    """The workspace's submit_job.py with the target and the run() overrides as its flags."""
    cmd = [sys.executable, str(ws / "submit_job.py"), "--config", str(cfg)]
    if target.kind == "local":
        cmd += ["--local", target.base_url]
    for flag, key in (("--job-name", "job_name"), ("--teacher-model", "teacher_model"), ("--model", "model")):
        if overrides.get(key):
            cmd += [flag, str(overrides[key])]
    if overrides.get("no_reward"):
        cmd.append("--no-reward")
    return [*cmd, *extra]


def dry_run(
    workspace: str | Path,
    target: Target | None = None,
    *,
    config: str = "config.yaml",
    sets: Mapping[str, Any] | None = None,
    fresh: bool = False,
    smoke: int | None = None,
    no_check: bool = False,
    timeout_s: float = 120.0,
    **overrides: Any,
) -> DryRun:
    """The preflight a submit would run, then the effective job submit_job.py would send (its `--dry-run`),
    with the same flags as `submit`.

    A preflight error is an OpdError (code ``preflight-failed``, exit 2) listing every finding; its
    warnings and notes come with the job. Nothing is sent, so no key is needed: the job shows whether one
    is set.
    """
    from opd_nb.spec.sets import normalize_sets

    ws, config, target, env = _prepare(workspace, target, config, need_key=False)
    sets = normalize_sets(sets)
    if not (ws / "submit_job.py").is_file():
        raise OpdError(
            f"{ws} has no submit_job.py, which --dry-run needs",
            fix="copy it from a new workspace (`opd new`)",
        )
    report = _preflight(ws, target, config, overrides, sets=sets, no_check=no_check, dry_run=True)
    checked = _checked_flag(ws, no_check)
    cmd = _script_command(
        ws, ws / config, target, overrides, ["--dry-run", *checked, *_script_flags(sets, fresh, smoke)]
    )
    try:
        proc = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise OpdError(f"the dry run did not finish within {timeout_s:.0f}s") from None
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or "").splitlines() if line.strip()]
        message = lines[-1].removeprefix("error: ") if lines else f"exit {proc.returncode}"
        raise OpdError(message, where=str(ws / config), exit_code=2 if proc.returncode == 2 else 1)
    try:
        job = json.loads(proc.stdout)
    except ValueError:
        raise OpdError("submit_job.py --dry-run printed no JSON", where=str(ws / "submit_job.py")) from None
    return DryRun(
        workspace=str(ws),
        target_kind=target.kind,
        base_url=target.base_url,
        job=job,
        findings=list(report.findings) if report is not None else [],
        checked=report is not None,
    )


def _read_result(path: Path) -> dict[str, Any]:
    """The result the runner wrote to `path` ({} when it wrote none: it failed before submitting), read as
    the versioned protocol it declares (:class:`opd_nb.wire.submit_result.ScriptResult`)."""
    try:
        data: JsonValue = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError:
        raise OpdError(f"the submit's result file {path} is not JSON", exit_code=1) from None
    if not isinstance(data, dict):
        raise OpdError(f"the submit's result file {path} holds no JSON object", exit_code=1)
    return read_script_result(data).model_dump()


def _last_json_line(stdout: str) -> dict[str, Any]:
    """A legacy submit_job.py's result: the last line of its output that parses as a JSON object."""
    for line in reversed(stdout.splitlines()):
        try:
            data: JsonValue = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return {}


def _runner_output(
    proc: subprocess.CompletedProcess[str], data: dict[str, Any], legacy: bool
) -> tuple[str, list[dict[str, Any]], list[str]]:
    """(job id, functions, stderr tail) from the runner's result `data`; a failed run is an OpdError."""
    tail = (proc.stderr or "").splitlines()[-15:]
    job_id, functions = data.get("job_id"), list[dict[str, Any]](data.get("functions") or [])
    if not job_id and data.get("message"):
        tail.append(f"service: [{data.get('code')}] {data.get('message')}")
    if proc.returncode != 0 or not job_id:
        detail = "\n".join(line for line in tail if line.strip()) or (proc.stdout or "").strip()[-500:]
        if proc.returncode == 0:  # it says it submitted, yet no job id came back
            detail = (LEGACY_NOTE if legacy else "the runner wrote no result") + (
                f"\n{detail}" if detail else ""
            )
        raise OpdError(
            f"submission failed (exit {proc.returncode}):\n{detail}",
            exit_code=2 if proc.returncode == 2 else 1,
        )
    return job_id, functions, tail


def _runner_command(
    ws: Path, target: Target, config: str, overrides: Mapping[str, Any], flags: list[str], result_file: Path
) -> tuple[str, list[str], bool]:
    """(runner, command, legacy): the workspace's submit_job.py (legacy: one without --result-file,
    told `--json` instead), else our SDK runner; both write their result to `result_file`."""
    cfg = ws / config
    if (ws / "submit_job.py").is_file():
        legacy = not _script_knows(ws, RESULT_FLAG)
        output = ["--json"] if legacy else [RESULT_FLAG, str(result_file)]
        return "submit_job.py", _script_command(ws, cfg, target, overrides, [*output, *flags]), legacy
    args = {
        "config": str(cfg),
        **overrides,
        "result_file": str(result_file),
        "protocol": SUBMIT_RESULT_PROTOCOL,
    }
    return "sdk", [sys.executable, "-c", _RUNNER, json.dumps(args)], False


def _run_runner(
    ws: Path, cmd: list[str], env: dict[str, str], timeout_s: float, result_file: Path | None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the runner: its process and its result (from `result_file`; None: a legacy script's output)."""
    try:
        proc = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise OpdError(f"submission did not finish within {timeout_s:.0f}s") from None
    return proc, _last_json_line(proc.stdout or "") if result_file is None else _read_result(result_file)


def submit(
    workspace: str | Path,
    target: Target | None = None,
    *,
    config: str = "config.yaml",
    job_name: str | None = None,
    teacher_model: str | None = None,
    model: str | None = None,
    no_reward: bool = False,
    fresh: bool = False,
    sets: Mapping[str, Any] | None = None,
    yes: bool = False,
    no_check: bool = False,
    smoke: int | None = None,
    timeout_s: float = 600.0,
    client: JobClient | None = None,
    on_note: Callable[[str], None] | None = None,
    preflight_done: bool = False,
    request_id: str | None = None,
) -> SubmitResult:
    """Check, ask, then register functions, upload data and submit exactly as the SDK does.

    The preflight gate runs first (`no_check` skips it); a Bailian job needs `yes` (else an OpdError
    with code ``needs-confirmation`` says what would start, and nothing is sent). `sets`
    (``{"training.hyper_parameters.learning_rate": 2e-6}``) changes config values for this submit
    only, `fresh` registers the functions again, `smoke` (0: default size, or N rows) sends a
    sampled one-epoch run named ``-smoke``; these need the workspace's submit_job.py. `client` (the
    caller's, on `target`; else a new one) reads the job back, and the result keeps it (`.client`).
    `on_note` is given each warning of the gate before anything is sent (the terminal prints them); the
    result's notes keep them too. `preflight_done`: the caller ran the gate on exactly this config (a sweep).

    A paid start is sent once (`request_id`: an agent's; see :func:`_send_once`).

    The runner writes its result to a file (submit_job.py's ``--result-file``): nothing the workspace's
    code prints can pass for it. An older template's submit_job.py (no such flag) still submits: its
    result is its last JSON line, and a note says how to update it.
    """
    from opd_nb.spec.sets import normalize_sets

    ws, config, target, env = _prepare(workspace, target, config)
    sets = normalize_sets(sets)
    overrides = {"job_name": job_name, "teacher_model": teacher_model, "model": model, "no_reward": no_reward}
    notes, flags = _before_start(
        ws, target, config, overrides, no_check=no_check, yes=yes, smoke=smoke, sets=sets, fresh=fresh,
        on_note=on_note, preflight_done=preflight_done,
    )  # fmt: skip
    client = client or JobClient(target)
    job_id, functions, tail, legacy, runner = _send_once(
        client, request_id, ws, target, config, overrides, flags, env=env, timeout_s=timeout_s, notes=notes
    )
    result = SubmitResult(
        job_id=job_id,
        job=client.get(job_id),
        target_kind=target.kind,
        base_url=target.base_url,
        workspace=str(ws),
        runner=runner,
        log_tail=tail,
        functions=functions,
        notes=[
            *notes,
            *([LEGACY_NOTE] if legacy else []),
            *(line for line in tail if line.startswith("smoke run:")),
            *(line.removeprefix("note: ") for line in tail if line.startswith(SCRIPT_LOST_NOTE)),
        ],
    )
    result._client = client  # pyright: ignore[reportPrivateUsage] - SubmitResult's own module binds it
    return result


# How the workspace's submit_job.py says it found a start whose answer was lost (it looks, never resends).
SCRIPT_LOST_NOTE = "note: the answer to this start was lost"


def _send_once(
    client: JobClient,
    request_id: str | None,
    ws: Path,
    target: Target,
    config: str,
    overrides: dict[str, Any],
    flags: list[str],
    *,
    env: dict[str, str],
    timeout_s: float,
    notes: list[str],
) -> tuple[str, list[dict[str, Any]], list[str], bool, str]:
    """:func:`_send`, and on Bailian once only: the job name carries the start's request id (NAME-rid-<8 hex>),
    and a start whose answer was lost is found by it (a note says so), never sent again."""
    rid = (request_id or new_request_id()) if is_paid(target.kind) else None
    if rid is not None:
        overrides["job_name"] = f"{overrides.get('job_name') or _config_name(ws / config)}-{rid}"
    try:
        return _send(ws, target, config, overrides, flags, env=env, timeout_s=timeout_s)
    except OpdError as exc:
        found = find_started_job(client, rid) if rid is not None else None
        if found is None:
            raise
        notes.append(lost_note(exc))
        return found.job_id, [], [], False, "found"


def _send(
    ws: Path,
    target: Target,
    config: str,
    overrides: Mapping[str, Any],
    flags: list[str],
    *,
    env: dict[str, str],
    timeout_s: float,
) -> tuple[str, list[dict[str, Any]], list[str], bool, str]:
    """Run the runner once: (job id, functions, stderr tail, legacy, runner); a failed run is an OpdError."""
    with tempfile.TemporaryDirectory(prefix="opd-submit-") as tmp:
        result_file = Path(tmp) / "result.json"
        runner, cmd, legacy = _runner_command(ws, target, config, overrides, flags, result_file)
        proc, data = _run_runner(ws, cmd, env, timeout_s, None if legacy else result_file)
    return *_runner_output(proc, data, legacy), legacy, runner


def _config_name(cfg: Path) -> str:
    """The config's `name` (the job name before the SDK's -<8 hex>), as the SDK reads it."""
    from opd_nb.spec.job import JobConfig, load_config

    try:
        return load_config(cfg).name
    except OpdError:  # the gate let it through: the SDK's default name
        return JobConfig().name


def find_started_job(client: JobClient, rid: str) -> Job | None:
    """The job a paid start with request id `rid` created (its name holds ``-rid-``), among the newest 100;
    None when the plane shows none (or cannot be asked)."""
    try:
        listing = client.list(page=1, size=100)
    except OpdError:
        return None
    return next((j for j in listing.jobs if f"-{rid}-" in (j.job_name or "")), None)
