"""`%%opd config [PATH]`: validate a YAML body with the preflight rules, write it only if clean."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin
from opd_nb.views import render, theme


def resolve_config_path(path: str | Path) -> tuple[Path, Path]:
    """(workspace, config file) for a PATH that is a workspace folder or a .yaml/.yml file."""
    p = Path(path).expanduser()
    if p.suffix in (".yaml", ".yml"):
        workspace = p.parent if str(p.parent) else Path(".")
        config = p
    else:
        workspace, config = p, p / "config.yaml"
    if not workspace.is_dir():
        raise OpdError(
            f"workspace {str(workspace)!r} does not exist",
            where=str(workspace),
            fix="create it with `%opd new`, or pass the right folder",
        )
    return workspace, config


def unified_diff(old: str, new: str, name: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), fromfile=f"a/{name}", tofile=f"b/{name}"
        )
    )


def diff_html(diff: str) -> str:
    """The diff, folded into a `<details>` line that counts it: a whole new config is a long diff that
    would push the cell's findings and the next cells out of sight (it opens with a click, no script)."""
    if not diff:
        return "<i>no changes</i>"
    lines = []
    added = removed = 0
    for line in diff.splitlines():
        status = "ok" if line.startswith("+") else "bad" if line.startswith("-") else ""
        if not line.startswith(("+++", "---")):
            added += line.startswith("+")
            removed += line.startswith("-")
        lines.append(
            theme.status_span(status, render.esc(line), styled=False) if status else render.esc(line)
        )
    summary = f"diff: {added} line(s) added, {removed} removed"
    return (
        f"{theme.STATUS_STYLE}<details><summary>{summary}</summary><pre>"
        + "\n".join(lines)
        + "</pre></details>"
    )


def blocking_errors(report: Any) -> list[Any]:
    """Errors that are about the YAML itself. Environment findings (`env.*`, e.g. no API key yet)
    are shown but do not stop config.yaml from being written: they don't depend on its content."""
    return [f for f in report.errors if not str(getattr(f, "rule", "")).startswith("env.")]


class ConfigWriteResult(ResultMixin, BaseModel):
    """The findings for a YAML body, and whether (and what) was written."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: str
    written: bool
    diff: str
    report: Any  # opd_nb.checks.CheckReport

    @property
    def ok(self) -> bool:
        return not blocking_errors(self.report)

    def _verdict(self) -> str:
        if self.written:
            return f"wrote {self.path}" if self.diff else f"{self.path} unchanged"
        return f"NOT written: {len(blocking_errors(self.report))} error(s); fix them and run the cell again"

    def __str__(self) -> str:
        parts = [self._verdict(), str(self.report)]
        if self.written and self.diff:
            parts.append(self.diff)
        return "\n".join(p for p in parts if p)

    def _repr_html_(self) -> str:
        cls = "ok" if self.written else "bad"
        html_report = (
            self.report._repr_html_()
            if hasattr(self.report, "_repr_html_")
            else f"<pre>{render.esc(self.report)}</pre>"
        )
        diff = diff_html(self.diff) if self.written else ""
        return render.box(f'<div class="{cls}"><b>{render.esc(self._verdict())}</b></div>{html_report}{diff}')


def default_target() -> str:
    """The target the kernel points at now (`%opd use`): the one resolver's plane (a loopback base URL is
    local), cloud when the configured URL is not one."""
    from opd_nb.errors import OpdError
    from opd_nb.workspace.connection import resolve_connection

    try:
        return resolve_connection().kind
    except OpdError:
        return "cloud"


def check_text(yaml_text: str, workspace: Path, target: str, config_name: str) -> Any:
    from opd_nb.checks import check_config_text

    return check_config_text(yaml_text, workspace, target=target, config_name=config_name)


def write_config_text(
    yaml_text: str, path: str | Path = ".", *, target: str | None = None
) -> ConfigWriteResult:
    """Check `yaml_text` as the workspace's config; write it only when the report has no errors."""
    target = target or default_target()
    if target not in ("cloud", "local"):
        raise OpdError(f"unknown target {target!r}", fix="use --target cloud or --target local")
    workspace, config = resolve_config_path(path)
    if not yaml_text.strip():
        raise OpdError(
            "the cell is empty", where=str(config), fix="put the YAML of config.yaml in the cell body"
        )
    report = check_text(yaml_text, workspace, target, config.name)
    text = yaml_text if yaml_text.endswith("\n") else yaml_text + "\n"
    old = config.read_text(encoding="utf-8") if config.is_file() else ""
    diff = unified_diff(old, text, config.name)
    written = not blocking_errors(report)
    if written and old != text:
        config.write_text(text, encoding="utf-8")
    return ConfigWriteResult(path=str(config), written=written, diff=diff, report=report)
