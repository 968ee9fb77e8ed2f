"""Run a workspace's own pytest suite in a fresh subprocess and report the results.

A subprocess (not ``pytest.main`` in the kernel) means every run imports the user's edited
``functions/`` code anew: no stale modules, no leftover test functions, no event-loop clashes.
The results come back through pytest's JUnit XML, so no pytest plugin of ours is needed.
Afterwards the workspace's reward runs on a few of its own rows (a fresh subprocess again), and a
metric the console would not show (not a float) becomes a warning of the report, and a call that
raises becomes an error (the report is then not ok: the function server would fail that call too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from opd_nb.errors import OpdError
from opd_nb.functions import reward_metrics
from opd_nb.results import ResultMixin
from opd_nb.views import render

Outcome = Literal["passed", "failed", "error", "skipped"]


class TestCase(BaseModel):
    """One test's outcome; `message` is the assertion line, `details` pytest's full report."""

    __test__ = False  # not a pytest test class

    name: str
    classname: str = ""
    file: str | None = None
    outcome: Outcome
    time_s: float = 0.0
    message: str = ""
    details: str = ""

    @property
    def nodeid(self) -> str:
        return f"{self.classname}::{self.name}" if self.classname else self.name


class TestReport(ResultMixin, BaseModel):
    """What `opd test` / `%opd test` returns."""

    __test__ = False

    workspace: str
    cases: list[TestCase] = Field(default_factory=list)
    exit_code: int
    duration_s: float
    output_tail: str = ""  # pytest's own output (collection errors land here)
    warnings: list[str] = Field(default_factory=list)  # e.g. reward metrics the console would not show
    errors: list[str] = Field(default_factory=list)  # reward calls that raised on the workspace's own rows

    @property
    def passed(self) -> int:
        return sum(c.outcome == "passed" for c in self.cases)

    @property
    def failed(self) -> int:
        return sum(c.outcome in ("failed", "error") for c in self.cases)

    @property
    def skipped(self) -> int:
        return sum(c.outcome == "skipped" for c in self.cases)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.failed == 0 and not self.errors

    @property
    def failures(self) -> list[TestCase]:
        return [c for c in self.cases if c.outcome in ("failed", "error")]

    def summary(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        probe = f", the reward raised on its own rows ({len(self.errors)} error(s))" if self.errors else ""
        return (
            f"{verdict}: {self.passed} passed, {self.failed} failed, {self.skipped} skipped{probe} "
            f"in {self.duration_s:.1f}s ({self.workspace})"
        )

    def to_payload(self) -> dict:
        return {**self.model_dump(), "passed": self.passed, "failed": self.failed, "ok": self.ok}

    def __str__(self) -> str:
        lines = [self.summary()]
        for case in self.cases:
            lines.append(f"  {case.outcome.upper():7} {case.nodeid} ({case.time_s:.2f}s)")
            if case.message and case.outcome in ("failed", "error"):
                lines.append(f"          {case.message}")
        if not self.cases and self.output_tail:
            lines.append(self.output_tail)
        lines += [f"error: {e}" for e in self.errors]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def __rich__(self):  # noqa: ANN204 - rich renderable
        from rich.table import Table
        from rich.text import Text

        table = Table(title=Text(self.summary()), show_lines=False)
        table.add_column("outcome", no_wrap=True)
        table.add_column("test", overflow="fold")  # long parametrised ids wrap instead of being cut off
        table.add_column("time", no_wrap=True, justify="right")
        table.add_column("assertion", overflow="fold")
        colors = {"passed": "green", "failed": "red", "error": "red", "skipped": "yellow"}
        for case in self.cases:
            # ids and messages are plain text: a parametrised id's "[...]" must not be read as rich markup
            table.add_row(
                Text(case.outcome, style=colors[case.outcome]),
                Text(case.nodeid),
                f"{case.time_s:.2f}s",
                Text(case.message),
            )
        for error in self.errors:
            table.add_row(Text("error", style="red"), Text(error), "", Text(""))
        for warning in self.warnings:
            table.add_row(Text("warning", style="yellow"), Text(warning), "", Text(""))
        return table

    def _repr_html_(self) -> str:
        cls = "ok" if self.ok else "bad"
        rows = []
        for case in self.cases:
            outcome = f'<span class="{render.SEVERITY_CLASS.get("ok" if case.outcome == "passed" else "error" if case.outcome in ("failed", "error") else "warning")}">{case.outcome}</span>'
            detail = ""
            if case.outcome in ("failed", "error"):
                detail = f"<b>{render.esc(case.message)}</b>"
                if case.details:
                    detail += (
                        f"<details><summary>details</summary><pre>{render.esc(case.details)}</pre></details>"
                    )
            rows.append((outcome, case.nodeid, f"{case.time_s:.2f}s", detail))
        body = render.table(["outcome", "test", "time", "assertion"], rows, raw_cols=(0, 3))
        if not self.cases and self.output_tail:
            body += f"<pre>{render.esc(self.output_tail)}</pre>"
        body += "".join(f'<div class="bad">error: {render.esc(e)}</div>' for e in self.errors)
        body += "".join(f'<div class="warning">warning: {render.esc(w)}</div>' for w in self.warnings)
        return render.box(f'<div class="{cls}"><b>{render.esc(self.summary())}</b></div>{body}')


def _parse_junit(path: Path, workspace: Path) -> list[TestCase]:
    root = ET.parse(path).getroot()
    cases: list[TestCase] = []
    for tc in root.iter("testcase"):
        outcome: Outcome = "passed"
        message = details = ""
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = (
                    "failed" if child.tag == "failure" else "error" if child.tag == "error" else "skipped"
                )
                message = (child.get("message") or "").strip()
                details = (child.text or "").strip()
                break
        if outcome in ("failed", "error") and details:
            # pytest puts "AssertionError: assert ..." in message; keep the first "E " lines as the short text.
            elines = [ln[1:].strip() for ln in details.splitlines() if ln.startswith("E ")]
            if elines:
                message = " ".join(elines[:3])
        file = tc.get("file")
        cases.append(
            TestCase(
                name=tc.get("name", "?"),
                classname=tc.get("classname", ""),
                file=file,
                outcome=outcome,
                time_s=float(tc.get("time") or 0.0),
                message=message,
                details=details,
            )
        )
    return cases


def run_workspace_tests(
    workspace: str | Path = ".", *, extra_args: Sequence[str] = (), timeout_s: float = 600.0
) -> TestReport:
    """Run ``pytest`` in `workspace` (fresh interpreter, this environment) and parse the results."""
    ws = Path(workspace).expanduser()
    if not ws.is_dir():
        raise OpdError(
            f"workspace {str(ws)!r} does not exist",
            where=str(ws),
            fix="pass the folder made by `opd new`, or cd into it",
        )
    ws = ws.resolve()
    has_tests = (
        any(ws.glob("tests/test_*.py")) or any(ws.glob("test_*.py")) or any(ws.glob("tests/*_test.py"))
    )
    if not has_tests and not extra_args:
        raise OpdError(
            "no tests found",
            where=str(ws / "tests"),
            fix="add tests/test_reward.py (the template has one), or pass test paths",
        )
    with tempfile.TemporaryDirectory(prefix="opd-test-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "-o",
            "junit_family=xunit1",
            "--rootdir",
            str(ws),
            *extra_args,
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ws), env.get("PYTHONPATH", "")) if p)
        env.pop("PYTEST_ADDOPTS", None)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise OpdError(
                f"tests did not finish within {timeout_s:.0f}s",
                where=str(ws),
                fix="look for a test that waits on the network or loops forever",
            ) from None
        duration = time.perf_counter() - start
        output = (proc.stdout + proc.stderr).strip()
        if proc.returncode == 4 or (proc.returncode != 0 and not junit.exists()):
            raise OpdError(
                f"pytest could not run: {output.splitlines()[-1] if output else proc.returncode}",
                where=str(ws),
                fix="check the test arguments",
            )
        cases = _parse_junit(junit, ws) if junit.exists() else []
    warnings, errors = probe_reward(ws)
    return TestReport(
        workspace=str(ws),
        cases=cases,
        exit_code=proc.returncode,
        duration_s=duration,
        output_tail="\n".join(output.splitlines()[-30:]),
        warnings=warnings,
        errors=errors,
    )


_PROBE = r"""
import asyncio, importlib, inspect, json, sys
from dashscope.finetune.reinforcement import RewardInput
classpath = sys.argv[1]
if ":" in classpath:
    path, _, name = classpath.rpartition(":")
    module = path.removesuffix(".py").lstrip("./").replace("/", ".")
else:
    module, _, name = classpath.rpartition(".")
processor = getattr(importlib.import_module(module), name)()
async def main():
    ready = processor.setup() if hasattr(processor, "setup") else None
    if inspect.isawaitable(ready):
        await ready
    for payload in json.loads(sys.stdin.read()):
        try:
            out = processor.process(RewardInput.model_validate(payload))
            out = await out if inspect.isawaitable(out) else out
            body = out.model_dump(mode="json") if hasattr(out, "model_dump") else dict(out)
            print(json.dumps({"metrics": (body.get("reward") or {}).get("reward_metrics")}, default=repr))
        except Exception as exc:  # reported, never swallowed: the function server would fail this call too
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            print(json.dumps({"error": f"{type(exc).__name__}: {' '.join(lines[:3])}"[:400]}))
asyncio.run(main())
"""


def _probe_payloads(ws: Path, limit: int = 3) -> list[dict]:
    """A right and a wrong answer for each of the first rows of the workspace's data."""
    payloads = []
    for name in ("validation.jsonl", "train.jsonl"):
        path = ws / "data" / name
        lines = path.read_text(encoding="utf-8").splitlines()[:limit] if path.is_file() else []
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
                continue
            extra = given if isinstance(given := row.get("rollout_extra"), dict) else None
            solution = extra.get("solution") if extra else None
            messages = [m for m in row["messages"] if isinstance(m, dict) and m.get("role") != "assistant"]
            for answer in (str(solution or ""), "no answer"):
                turn = {"role": "assistant", "content": answer}
                payloads.append(
                    {
                        "ground_truth": solution,
                        "agent_output": {"messages": [*messages, turn], "rollout_extra": extra},
                    }
                )
        if payloads:
            break
    return payloads


def metric_warnings(workspace: str | Path, timeout_s: float = 120.0) -> list[str]:
    """Run the workspace's reward on a few of its rows; one warning per metric that is not a float."""
    return probe_reward(workspace, timeout_s)[0]


def probe_reward(workspace: str | Path, timeout_s: float = 120.0) -> tuple[list[str], list[str]]:
    """(warnings, errors) of the workspace's reward run on a few of its own rows.

    Warnings name metrics the console would drop; errors are calls that raised (a string metric
    that the SDK's `Reward` refuses, a bug), which the function server would fail in the job too.
    A workspace without a reward (or without rows to probe) yields neither; a reward that cannot be
    imported or does not answer in time is an error too.
    """
    from opd_nb.spec import parse_config_text, reward_classpath_of

    ws = Path(workspace)
    try:
        parsed = parse_config_text((ws / "config.yaml").read_text(encoding="utf-8"), str(ws / "config.yaml"))
    except (OSError, UnicodeDecodeError):
        return [], []
    classpath = reward_classpath_of(parsed.config) if parsed.config is not None else None
    payloads = _probe_payloads(ws) if classpath else []
    if not payloads or classpath is None:
        return [], []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ws), env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, classpath],
            cwd=ws,
            env=env,
            input=json.dumps(payloads),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return [], [f"the reward did not answer {len(payloads)} probe row(s) within {timeout_s:.0f}s"]
    found: dict[str, str] = {}
    raised: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and "error" in item:
            raised[str(item["error"])] = raised.get(str(item["error"]), 0) + 1
        elif isinstance(item, dict):
            found.update(reward_metrics.non_float(item.get("metrics")))
    errors = [
        f"{classpath} raised on {n} of {len(payloads)} probe row(s) from data/: {error} (the function server "
        "fails these calls in a job; fix the reward, e.g. return floats in reward_metrics)"
        for error, n in raised.items()
    ]
    if proc.returncode != 0 and not raised and not found:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        errors.append(f"{classpath} could not be run on the probe rows: {tail[:300]}")
    return [reward_metrics.message(key, kind) for key, kind in found.items()], errors
