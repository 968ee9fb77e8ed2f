"""Config form: `training.hyper_parameters` / `training.resources` from the spec table, checked live.

Every field comes from ``opd_nb.spec.hyperparams.PARAMS`` (type, range, help, small/large starting
points). Each edit re-runs the preflight rules on the YAML the form *would* write. Saving edits
only the changed lines of ``config.yaml`` (``opd_nb.spec.yaml_edit``: comments and layout stay),
refuses to write while there are errors, and shows the diff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from opd_nb.errors import OpdError
from opd_nb.notebook.configcell import (
    ConfigWriteResult,
    blocking_errors,
    check_text,
    default_target,
    diff_html,
    unified_diff,
)
from opd_nb.notebook.display import LiveView
from opd_nb.spec.yaml_edit import apply_values, yaml_scalar
from opd_nb.views import render, theme

UNSET = ""  # an empty field: the key is left out of the YAML


def parse_field(spec: Any, raw: Any) -> tuple[Any, str | None]:
    """(value, problem) for a field's raw widget value; '' means unset."""
    if raw is None or (isinstance(raw, str) and raw.strip() == UNSET):
        return None, None
    if spec.type in ("int", "float") and isinstance(raw, str):
        text = raw.strip()
        try:
            value: Any = int(text) if spec.type == "int" else float(text)
        except ValueError:
            return raw, f"{text!r} is not a {'whole number' if spec.type == 'int' else 'number'}"
    else:
        value = raw
    return value, spec.problem(value)


class ConfigForm(LiveView):
    """A form over the spec table for one workspace's config.yaml."""

    def __init__(
        self, workspace: str | Path = ".", *, config: str = "config.yaml", target: str | None = None
    ):
        from opd_nb.spec.hyperparams import PARAMS

        self.workspace = Path(workspace).expanduser()
        self.path = self.workspace / config
        if not self.path.is_file():
            raise OpdError(
                f"{self.path} not found",
                where=str(self.path),
                fix="create a workspace with `%opd new` or pass its folder",
            )
        self.target = target or default_target()
        self.params = list(PARAMS)
        self.original = self.path.read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(self.original) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{self.path}:{mark.line + 1}" if mark else str(self.path)
            raise OpdError(
                f"config.yaml is not valid YAML: {getattr(exc, 'problem', exc)}",
                where=where,
                fix="fix it by hand or with %%opd config",
            ) from None
        training = (data.get("training") or {}) if isinstance(data, dict) else {}
        self.initial = {p.name: (training.get(p.section) or {}).get(p.name) for p in self.params}
        self.raw: dict[str, Any] = {p.name: self._to_raw(p, self.initial[p.name]) for p in self.params}
        self.report: Any = None
        self.last_save: ConfigWriteResult | None = None
        self._widgets: dict[str, Any] | None = None
        self._build()
        self.validate()

    # ------------------------------------------------------------ values
    @staticmethod
    def _to_raw(spec: Any, value: Any) -> Any:
        if value is None:
            return UNSET
        if spec.type in ("int", "float") and not spec.choices:
            return yaml_scalar(value) if isinstance(value, float) else str(value)
        return value

    def field_problems(self) -> dict[str, str]:
        out = {}
        for p in self.params:
            _, problem = parse_field(p, self.raw[p.name])
            if problem:
                out[p.name] = problem
        return out

    @property
    def values(self) -> dict[str, Any]:
        """The parsed value of every field (None = left out of the YAML)."""
        return {p.name: parse_field(p, self.raw[p.name])[0] for p in self.params}

    def set(self, name: str, value: Any) -> None:
        """Set one field as a user would (numbers may be given as text); re-validates."""
        spec = next((p for p in self.params if p.name == name), None)
        if spec is None:
            raise OpdError(f"unknown field {name!r}", fix="see opd_nb.spec.hyperparams.PARAMS for the names")
        raw = self._to_raw(spec, value) if not isinstance(value, str) else value
        if self._widgets is not None:
            widget = self._widgets["fields"][name]
            options = getattr(widget, "options", None)
            if options is not None and raw not in [o[1] if isinstance(o, tuple) else o for o in options]:
                widget.options = [*options, (f"{raw!r} (invalid)", raw)]  # shown, and flagged by validation
            widget.value = raw if raw is not None else UNSET  # the observer re-validates
        else:
            self.raw[name] = raw
            self.validate()

    def apply_preset(self, size: str) -> None:
        """Fill the documented starting point ("small": ≤14B student, "large": ≥30B)."""
        if size not in ("small", "large"):
            raise OpdError(f"unknown preset {size!r}", fix="use 'small' or 'large'")
        for p in self.params:
            value = p.small if size == "small" else p.large
            if value is not None and p.consumed_by_opd:
                self.set(p.name, value)

    def yaml_text(self) -> str:
        """The config.yaml the form would write (only changed keys are touched)."""
        changes: dict[str, dict[str, Any]] = {}
        values = self.values
        for p in self.params:
            if values[p.name] != self.initial[p.name] or type(values[p.name]) is not type(
                self.initial[p.name]
            ):
                if values[p.name] is None and self.initial[p.name] is None:
                    continue
                changes.setdefault(p.section, {})[p.name] = values[p.name]
        return apply_values(self.original, changes) if changes else self.original

    def diff(self) -> str:
        return unified_diff(self.original, self.yaml_text(), self.path.name)

    def validate(self) -> Any:
        """Run the preflight rules on the YAML the form would write; updates the findings view."""
        problems = self.field_problems()
        self.report = check_text(self.yaml_text(), self.workspace, self.target, self.path.name)
        self._render(problems)
        return self.report

    @property
    def ok(self) -> bool:
        return not self.field_problems() and self.report is not None and not blocking_errors(self.report)

    def save(self) -> ConfigWriteResult:
        """Write config.yaml if the form has no errors; returns the findings and the diff."""
        report = self.validate()
        text = self.yaml_text()
        diff = unified_diff(self.original, text, self.path.name)
        written = self.ok
        if written and text != self.original:
            self.path.write_text(text, encoding="utf-8")
            self.original = text
            self.initial = dict(self.values)
        self.last_save = ConfigWriteResult(path=str(self.path), written=written, diff=diff, report=report)
        if self._widgets is not None:
            self._widgets["result"].value = self.last_save._repr_html_()
            self._render(self.field_problems())
        self._refresh_static(force=True)  # the saved snapshot shows what was written
        return self.last_save

    # ------------------------------------------------------------ widgets
    def _build(self) -> None:
        try:
            import ipywidgets as W
        except ImportError:
            return
        fields: dict[str, Any] = {}
        notes: dict[str, Any] = {}
        rows = []
        group = None
        for p in self.params:
            if p.group != group:
                group = p.group
                rows.append(W.HTML(f"<b>{render.esc(group or p.section)}</b> <small>({p.section})</small>"))
            if p.choices or p.type == "bool":
                options = [("(not set)", UNSET)] + [(str(c), c) for c in (p.choices or [True, False])]
                current = self.raw[p.name]
                if current not in [o[1] for o in options]:
                    options.append((f"{current!r} (invalid)", current))
                widget = W.Dropdown(options=options, value=current, layout=W.Layout(width="220px"))
            else:
                widget = W.Text(
                    value=str(self.raw[p.name]),
                    placeholder="(not set)",
                    layout=W.Layout(width="220px"),
                    continuous_update=False,
                )
            widget.add_class(f"opd-field-{p.name}")
            widget.observe(lambda change, name=p.name: self._on_change(name, change["new"]), names="value")
            label = W.HTML(
                f'<code title="{render.esc(p.help)}">{render.esc(p.name)}</code>',
                layout=W.Layout(width="260px"),
            )
            hint = render.esc(p.range_text()) + ("" if p.consumed_by_opd else " · <i>not used by OPD</i>")
            note = W.HTML(f"<small>{hint} — {render.esc(p.help)}</small>", layout=W.Layout(width="55%"))
            fields[p.name], notes[p.name] = widget, note
            rows.append(W.HBox([label, widget, note]))
        small = W.Button(description="Small model start", tooltip="Starting point for a ≤14B student")
        large = W.Button(description="Large model start", tooltip="Starting point for a ≥30B student")
        save = W.Button(description="Save config.yaml", button_style="primary", icon="save")
        small.on_click(lambda _b: self.apply_preset("small"))
        large.on_click(lambda _b: self.apply_preset("large"))
        save.on_click(lambda _b: self.save())
        findings = W.HTML()
        diff = W.HTML()
        result = W.HTML()
        title = W.HTML(
            f"<b>{render.esc(self.path)}</b> — checked against the <b>{render.esc(self.target)}</b> rules"
        )
        box = W.VBox([title, W.HBox([small, large, save]), *rows, findings, diff, result])
        box.add_class("opd-config-form")
        self._widgets = {
            "box": box,
            "fields": fields,
            "notes": notes,
            "findings": findings,
            "diff": diff,
            "result": result,
            "save": save,
            "small": small,
            "large": large,
        }

    def _on_change(self, name: str, raw: Any) -> None:
        self.raw[name] = raw
        self.validate()

    def _render(self, problems: dict[str, str]) -> None:
        w = self._widgets
        if w is None:
            return
        for p in self.params:
            hint = render.esc(p.range_text()) + ("" if p.consumed_by_opd else " · <i>not used by OPD</i>")
            bad = problems.get(p.name)
            extra = " " + theme.status_span("bad", f"<b>✗ {render.esc(bad)}</b>") if bad else ""
            w["notes"][p.name].value = f"<small>{hint} — {render.esc(p.help)}</small>{extra}"
        w["findings"].value = self._findings_html(problems)
        diff = self.diff()
        w["diff"].value = render.box(diff_html(diff), title="diff against config.yaml") if diff else ""
        w["save"].disabled = not self.ok

    def _findings_html(self, problems: dict[str, str]) -> str:
        parts = [f'<div class="bad">✗ {render.esc(k)}: {render.esc(v)}</div>' for k, v in problems.items()]
        report_html = ""
        if self.report is not None:
            report_html = (
                self.report._repr_html_()
                if hasattr(self.report, "_repr_html_")
                else f"<pre>{render.esc(self.report)}</pre>"
            )
        return render.box("".join(parts) + report_html, title="preflight")

    def widget(self) -> Any:
        return None if self._widgets is None else self._widgets["box"]

    # ------------------------------------------------------------ reprs
    def _repr_html_(self) -> str:
        rows = [
            (p.name, p.section, render.fmt(self.values[p.name]), p.range_text(), p.help) for p in self.params
        ]
        return render.box(
            render.table(["key", "section", "value", "allowed", "help"], rows)
            + self._findings_html(self.field_problems()),
            title=str(self.path),
        )

    def to_html(self) -> str:
        """The static snapshot a saved notebook keeps (:class:`~opd_nb.notebook.display.LiveView`)."""
        return self._repr_html_()

    def __str__(self) -> str:
        lines = [f"config form for {self.path} ({'ok' if self.ok else 'has errors'})"]
        for p in self.params:
            lines.append(f"  {p.section}.{p.name} = {self.values[p.name]!r}")
        for k, v in self.field_problems().items():
            lines.append(f"  ✗ {k}: {v}")
        return "\n".join(lines)


def config_form(workspace: str | Path = ".", *, target: str | None = None) -> ConfigForm:
    """The config form for `workspace` (display it as a cell's last value)."""
    return ConfigForm(workspace, target=target)
