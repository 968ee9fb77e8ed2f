"""Findings and the report `opd check` prints (a table), returns (`--json`) and renders (HTML)."""

from __future__ import annotations

import html
from typing import Any

from pydantic import BaseModel, Field

from opd_nb.findings import Finding, Severity
from opd_nb.results import ResultMixin
from opd_nb.views import theme

_ORDER = {"error": 0, "warning": 1, "info": 2}
_COLOR = {"error": "red", "warning": "yellow", "info": "cyan"}
_HTML_STATUS = {"error": "bad", "warning": "warn", "info": "info"}  # theme.STATUS, light and dark


class CheckReport(ResultMixin, BaseModel):
    """All findings for one workspace and target; `ok` means no errors."""

    workspace: str = "."
    target: str = "cloud"
    findings: list[Finding] = Field(default_factory=list)

    def add(self, rule: str, severity: Severity, where: str, message: str, fix: str = "") -> Finding:
        f = Finding(rule=rule, severity=severity, where=where, message=message, fix=fix)
        self.findings.append(f)
        return f

    def extend(self, other: CheckReport) -> None:
        self.findings.extend(other.findings)

    def sort(self) -> CheckReport:
        self.findings.sort(key=lambda f: _ORDER[f.severity])  # stable: rule order kept within a severity
        return self

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def infos(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "info"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def rules(self) -> set[str]:
        return {f.rule for f in self.findings}

    def by_rule(self, rule: str) -> list[Finding]:
        return [f for f in self.findings if f.rule == rule]

    def to_list(self) -> list[dict[str, Any]]:
        return [f.model_dump() for f in self.findings]

    def to_payload(self) -> list[dict[str, Any]]:
        """The `--json` output: a JSON list of findings."""
        return self.to_list()

    def summary(self) -> str:
        e, w, i = len(self.errors), len(self.warnings), len(self.infos)
        verdict = "ready to submit" if self.ok else "fix the errors before submitting"
        return f"{e} error(s), {w} warning(s), {i} note(s) for target {self.target}: {verdict}"

    def __str__(self) -> str:
        body = "\n".join(str(f) for f in self.findings)
        return (body + "\n" if body else "") + self.summary()

    def __rich_console__(self, console: Any, options: Any) -> Any:
        """A table on wide terminals; on narrow ones a ruff-like list (a 4-column table would be unreadable)."""
        from rich.table import Table
        from rich.text import Text

        verdict = Text(self.summary(), style="green" if self.ok else "bold red")
        if options.max_width < 110:
            for f in self.findings:
                head = Text()
                head.append(f"{f.severity:<7} ", style=_COLOR[f.severity])
                head.append(f.where, style="bold")
                head.append(f"  [{f.rule}]", style="dim")
                yield head
                yield Text("  " + f.message)
                if f.fix:
                    yield Text("  fix: " + f.fix, style="dim")
            yield verdict
            return
        table = Table(show_header=True, header_style="bold", expand=False)
        table.add_column("severity", no_wrap=True)
        table.add_column("rule", no_wrap=True)
        table.add_column("where", no_wrap=True, max_width=40, overflow="fold")
        table.add_column("problem and fix", overflow="fold", ratio=1)
        for f in self.findings:
            text = Text(f.message)
            if f.fix:
                text.append(f"\nfix: {f.fix}", style="dim")
            table.add_row(Text(f.severity, style=_COLOR[f.severity]), Text(f.rule), Text(f.where), text)
        if self.findings:
            yield table
        yield verdict

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><b class='opd-{_HTML_STATUS[f.severity]}'>{f.severity}</b></td>"
            f"<td><code>{html.escape(f.rule)}</code></td><td><code>{html.escape(f.where)}</code></td>"
            f"<td>{html.escape(f.message)}"
            + (f"<br><small><b>fix:</b> {html.escape(f.fix)}</small>" if f.fix else "")
            + "</td></tr>"
            for f in self.findings
        )
        verdict = theme.status_span(
            "ok" if self.ok else "bad", f"<b>{html.escape(self.summary())}</b>", styled=False
        )
        table = (
            (
                "<table><thead><tr><th>severity</th><th>rule</th><th>where</th><th>problem and fix</th></tr>"
                f"</thead><tbody>{rows}</tbody></table>"
            )
            if self.findings
            else ""
        )
        return f"<div class='opd-check'>{theme.STATUS_STYLE}{table}<p>{verdict}</p></div>"
