"""Run a workspace's own pytest suite in a fresh subprocess and report the results.

A subprocess (not ``pytest.main`` in the kernel) means every run imports the user's edited
``functions/`` code anew: no stale modules, no leftover test functions, no event-loop clashes.
The results come back through pytest's JUnit XML, so no pytest plugin of ours is needed.
"""

from __future__ import annotations

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

from opd_nb import render
from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin

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
        return self.exit_code == 0 and self.failed == 0

    @property
    def failures(self) -> list[TestCase]:
        return [c for c in self.cases if c.outcome in ("failed", "error")]

    def summary(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        return (
            f"{verdict}: {self.passed} passed, {self.failed} failed, {self.skipped} skipped "
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
    tail = "\n".join(output.splitlines()[-30:])
    return TestReport(
        workspace=str(ws), cases=cases, exit_code=proc.returncode, duration_s=duration, output_tail=tail
    )
