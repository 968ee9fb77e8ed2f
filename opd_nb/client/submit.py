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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from opd_nb.client.jobs import Job, JobClient
from opd_nb.client.target import Target, resolve_target
from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin

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
print(json.dumps({"job_id": job_id, "status_code": res.status_code, "code": getattr(res, "code", None),
                  "message": getattr(res, "message", None)}))
sys.exit(0 if job_id else 1)
"""


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

    def __str__(self) -> str:
        status = self.job.status if self.job else "submitted"
        notes = [
            *self.notes,
            *(str(f["note"]) for f in self.functions if f.get("note")),
        ]  # reused or registered
        return "\n".join(
            [f"submitted {self.job_id} ({status}) to {self.target_kind} {self.base_url}", *notes]
        )

    def _repr_html_(self) -> str:
        status = self.job.status if self.job else "submitted"
        notes = "".join(
            f"<br><small>{html.escape(str(n))}</small>"
            for n in [*self.notes, *(f["note"] for f in self.functions if f.get("note"))]
        )
        return (
            f"<div>submitted <code>{html.escape(self.job_id)}</code> ({html.escape(status)}) to "
            f"{self.target_kind} <code>{html.escape(self.base_url)}</code>{notes}</div>"
        )


class DryRun(ResultMixin, BaseModel):
    """What `opd submit --dry-run` prints: the workspace's submit_job.py --dry-run, nothing sent."""

    workspace: str
    target_kind: str
    base_url: str
    job: dict[str, Any]  # the effective job, as submit_job.py computes it (the key only as its source)

    def to_payload(self) -> dict[str, Any]:
        return self.job

    def __str__(self) -> str:
        head = f"dry run on {self.target_kind} {self.base_url}: nothing sent"
        return head + "\n" + json.dumps(self.job, indent=2, ensure_ascii=False, default=str)

    def _repr_html_(self) -> str:
        body = html.escape(json.dumps(self.job, indent=2, ensure_ascii=False, default=str))
        return (
            f"<div>dry run on {html.escape(self.target_kind)} <code>{html.escape(self.base_url)}</code>: "
            f"nothing sent<pre>{body}</pre></div>"
        )


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` items as submit_job.py reads them: KEY a dotted path, VALUE JSON (else plain text)."""
    sets: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise OpdError(
                f"expected KEY=VALUE, got {item!r}",
                where="--set",
                fix="e.g. --set training.hyper_parameters.learning_rate=2e-6",
            )
        try:
            sets[key] = json.loads(raw)
        except ValueError:
            sets[key] = raw
    return sets


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


def _before_start(
    ws: Path, target: Target, config: str, overrides: Mapping[str, Any], **how: Any
) -> tuple[list[str], list[str]]:
    """The gate (unless `no_check`) and, on Bailian, the consent: (notes, flags for submit_job.py).

    submit_job.py gets `--no-check` and `--yes` for what was decided here, so it does neither twice.
    """
    from opd_nb.estimate import estimate  # here, not at import: `%load_ext opd_nb` stays light
    from opd_nb.spend import gate, is_paid, require_consent

    notes: list[str] = []
    if how["no_check"]:
        notes.append("preflight skipped (--no-check)")
    else:
        gate(str(ws), target.kind, base_url=target.base_url, config=config)
    flags: list[str] = []
    if is_paid(target.kind):
        size = estimate(ws, config=config, sets=dict(how["sets"] or {}), smoke=how["smoke"], **overrides)
        require_consent(target.kind, how["yes"], size.start_line())
        flags = [f for f in ("--yes", "--no-check") if _script_knows(ws, f)]
    if how["smoke"] is not None and not _script_knows(ws, "--smoke"):
        raise OpdError(
            "this workspace's submit_job.py predates --smoke",
            where=str(ws / "submit_job.py"),
            fix="copy submit_job.py from a new workspace (`opd new`)",
        )
    return notes, flags


def _prepare(
    workspace: str | Path, target: Target | None, config: str, *, need_key: bool = True
) -> tuple[Path, Target, dict[str, str]]:
    """(workspace, target, the child's environment): the key travels only there."""
    ws = Path(workspace).expanduser().resolve()
    if not (ws / config).is_file():
        raise OpdError(f"no {config} in {ws}", fix="pass the workspace folder (create one with `opd new`)")
    target = target or resolve_target(workspace=ws)
    if need_key and target.api_key is None:
        raise OpdError(
            "no API key for the cloud target", fix="set DASHSCOPE_API_KEY in the environment or .env"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    env.update(target.env())
    env["NO_PROXY"] = ",".join(filter(None, [env.get("NO_PROXY", ""), "127.0.0.1", "localhost"]))
    env.setdefault("LOG_LEVEL", "warning")
    return ws, target, env


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
    timeout_s: float = 120.0,
    **overrides: Any,
) -> DryRun:
    """The effective job submit_job.py would send (its `--dry-run`), with the same flags as `submit`.

    Nothing is sent, so no key is needed: the job shows whether one is set.
    """
    ws, target, env = _prepare(workspace, target, config, need_key=False)
    if not (ws / "submit_job.py").is_file():
        raise OpdError(
            f"{ws} has no submit_job.py, which --dry-run needs",
            fix="copy it from a new workspace (`opd new`)",
        )
    cmd = _script_command(
        ws, ws / config, target, overrides, ["--dry-run", *_script_flags(sets, fresh, smoke)]
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
    return DryRun(workspace=str(ws), target_kind=target.kind, base_url=target.base_url, job=job)


def _runner_output(proc: subprocess.CompletedProcess) -> tuple[str, list[dict[str, Any]], list[str]]:
    """(job id, functions, stderr tail) from the runner's last JSON line; a failed run is an OpdError."""
    tail = (proc.stderr or "").splitlines()[-15:]
    job_id, functions = None, []
    for line in reversed((proc.stdout or "").splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            job_id = data.get("job_id")
            functions = data.get("functions") or []
            if not job_id and data.get("message"):
                tail.append(f"service: [{data.get('code')}] {data.get('message')}")
            break
    if proc.returncode != 0 or not job_id:
        detail = "\n".join(line for line in tail if line.strip()) or (proc.stdout or "").strip()[-500:]
        raise OpdError(
            f"submission failed (exit {proc.returncode}):\n{detail}",
            exit_code=2 if proc.returncode == 2 else 1,
        )
    return job_id, functions, tail


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
) -> SubmitResult:
    """Check, ask, then register functions, upload data and submit exactly as the SDK does.

    The preflight gate runs first (`no_check` skips it); a Bailian job needs `yes` (else an OpdError
    with code ``needs-confirmation`` says what would start, and nothing is sent). `sets`
    (``{"training.hyper_parameters.learning_rate": 2e-6}``) changes config values for this submit
    only, `fresh` registers the functions again, `smoke` (0: default size, or N rows) sends a
    sampled one-epoch run named ``-smoke``; these need the workspace's submit_job.py.
    """
    ws, target, env = _prepare(workspace, target, config)
    cfg = ws / config
    overrides = {"job_name": job_name, "teacher_model": teacher_model, "model": model, "no_reward": no_reward}
    notes, flags = _before_start(
        ws, target, config, overrides, no_check=no_check, yes=yes, smoke=smoke, sets=sets
    )
    if (ws / "submit_job.py").is_file():
        runner = "submit_job.py"
        cmd = _script_command(
            ws, cfg, target, overrides, ["--json", *flags, *_script_flags(sets, fresh, smoke)]
        )
    else:
        if fresh or sets:
            raise OpdError(
                f"{ws} has no submit_job.py, which --fresh and --set need",
                fix="copy submit_job.py from a new workspace (`opd new`)",
            )
        runner = "sdk"
        cmd = [sys.executable, "-c", _RUNNER, json.dumps({"config": str(cfg), **overrides})]
    try:
        proc = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise OpdError(f"submission did not finish within {timeout_s:.0f}s") from None
    job_id, functions, tail = _runner_output(proc)
    job = JobClient(target).get(job_id)
    return SubmitResult(
        job_id=job_id,
        job=job,
        target_kind=target.kind,
        base_url=target.base_url,
        workspace=str(ws),
        runner=runner,
        log_tail=tail,
        functions=functions,
        notes=notes + [line for line in tail if line.startswith("smoke run:")],
    )
