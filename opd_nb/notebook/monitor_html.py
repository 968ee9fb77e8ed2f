"""The job monitor's static views of a state snapshot: HTML (widgets and saved notebooks), text, rich.

Pure functions of ``JobMonitor.state`` (and the chart's HTML): the widgets show these same fragments
while the jobs run, and the saved notebook keeps the last ones as a self-contained snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from opd_nb.constants import (
    CANCELED,
    ENTROPY,
    FAILED,
    LOSS,
    REWARD_MEAN,
    SUCCEEDED,
    TEACHER_KL,
    VALID_TOKEN_RATE,
    ZERO_VARIANCE_GROUPS,
)
from opd_nb.health.checkpoint_table import expires_text, export_hint
from opd_nb.notebook.rollout_html import samples_panel_html
from opd_nb.views import render

STATUS_CLASS = {SUCCEEDED: "ok", FAILED: "bad", CANCELED: "warn"}
DIAGNOSTICS = (TEACHER_KL, ENTROPY, ZERO_VARIANCE_GROUPS)  # the engine's per-step diagnostics, plotted too
CLOUD_NOTE = (
    "This API has no metrics endpoint (Bailian): showing status, events and logs only. "
    "Open the job in the Bailian console for the curves."
)


# The status table's metric columns (header, metric): each shows its latest logged value.
STATUS_METRICS = (
    ("loss", LOSS),
    ("valid_token_rate", VALID_TOKEN_RATE),
    ("reward mean@1", REWARD_MEAN),
    ("teacher_kl", TEACHER_KL),
    ("entropy", ENTROPY),
    ("zero-variance groups", ZERO_VARIANCE_GROUPS),
)


def epoch_text(epoch: Any, n_epochs: Any) -> str:
    """Epochs done as the engine reports them (a fraction while one runs): "0.91/2", "2/2"."""
    if epoch is None:
        return ""
    done = render.fmt(epoch) if isinstance(epoch, int) or float(epoch).is_integer() else f"{epoch:.2f}"
    done = done.removesuffix(".0")
    return f"{done}/{n_epochs}" if n_epochs else done


def steps_text(step: Any, total: Any) -> str:
    """Steps done, over the total where it is known: "58/192", "58"."""
    return f"{step}/{total}" if total else str(step)


def latest_text(v: dict[str, Any], metric: str) -> str:
    """A metric's latest value; with the step it was logged at when that is not the current step (the
    validation reward is logged every eval_steps, and stays shown in between)."""
    found = (v.get("latest") or {}).get(metric)
    if found is None:
        return ""
    value = render.fmt(found["value"])
    return value if found["step"] == v["step"] else f"{value} (step {found['step']})"


def eta_text(eta_s: float | None, seen_at: float | None = None) -> str:
    """The time left: "412s" in a live view; in a snapshot read later (`seen_at`, when the state was
    seen) the clock time it pointed at, "≈13:42", which a countdown saved mid-run would not stay."""
    if eta_s is None:
        return ""
    if seen_at is None:
        return f"{eta_s:.0f}s"
    return "≈" + time.strftime("%H:%M", time.localtime(seen_at + eta_s))


def _status_row(jid: str, v: dict[str, Any], seen_at: float | None) -> tuple[Any, ...]:
    status = f'<span class="{STATUS_CLASS.get(v["status"], "")}"><b>{render.esc(v["status"])}</b></span>'
    if v["cancel_requested"] and not v["terminal"]:
        status += " (cancel sent)"
    step = steps_text(v["step"], v["total_steps"])
    eta = eta_text(v["eta_s"], seen_at) if not v["terminal"] else ""
    metrics = tuple(latest_text(v, metric) for _, metric in STATUS_METRICS)
    return (render.esc(jid), status, step, epoch_text(v["epoch"], v["n_epochs"]), eta, *metrics)


def plot_names(rows_by_job: Mapping[str, Sequence[Mapping[str, Any]]], names: Sequence[str]) -> list[str]:
    """The plot's panels: the key metrics (`names`), then the diagnostics any job reports."""
    present = {k for rows in rows_by_job.values() for row in rows for k in row}
    return list(names) + [m for m in DIAGNOSTICS if m in present and m not in names]


def status_html(state: dict[str, Any], seen_at: float | None = None) -> str:
    """One row per job: status, step, epoch, ETA, the key metrics and diagnostics; then the functions it
    runs. `seen_at`: the state is a snapshot seen then (the ETA becomes the clock time it pointed at)."""
    return render.table(
        ["job", "status", "step", "epoch", "ETA", *(header for header, _ in STATUS_METRICS)],
        [_status_row(jid, v, seen_at) for jid, v in state["jobs"].items()],
        raw_cols=(0, 1),
    ) + "".join(
        f"<div><small>{render.esc(jid)} runs: "
        + ", ".join(render.esc(f"{f['name']} ({f['type']}, {f['entity_id']})") for f in v["functions"])
        + "</small></div>"
        for jid, v in state["jobs"].items()
        if v.get("functions")
    )


def notes_html(state: dict[str, Any]) -> str:
    """The monitor's notes: what the submit said (functions reused or registered), what the guard did."""
    return "".join(f"<div><small>{render.esc(note)}</small></div>" for note in state.get("notes") or [])


def alerts_html(state: dict[str, Any]) -> str:
    """Health alerts (with their fix), polling errors, and the note for an API without metrics."""
    parts = []
    for jid, v in state["jobs"].items():
        for a in v["alerts"]:
            cls = render.SEVERITY_CLASS.get(a["severity"], "")
            parts.append(
                f'<div class="{cls}">⚠ {render.esc(jid)}: {render.esc(a["message"])}'
                f" — <i>{render.esc(a['fix'])}</i></div>"
            )
        if v["error"]:
            parts.append(f'<div class="warn">{render.esc(jid)}: {render.esc(v["error"])}</div>')
        if v["metrics_available"] is False:
            parts.append(f"<div><i>{render.esc(CLOUD_NOTE)}</i></div>")
        if v.get("meter"):
            parts.append(f"<div>{render.esc(v['meter'])}</div>")
    return "".join(parts)


def _checkpoint_rows(v: dict[str, Any]) -> list[tuple[Any, ...]]:
    best = v["best_checkpoint"] or {}
    rows = []
    for c in v["checkpoints"]:
        mark = (
            f'<b class="ok">best</b> ({render.esc(best.get("reason"))})'
            if c["name"] == best.get("name")
            else "unscored"
            if c["name"] in v.get("unscored_checkpoints", ())
            else ""
        )
        rows.append(
            (
                render.esc(c["name"]),
                c["step"],
                render.fmt(c["metrics"].get(REWARD_MEAN)),
                render.fmt(c["metrics"].get(LOSS)),
                c.get("model_name") or "",
                c.get("display_name") or "",
                expires_text(c.get("expires_in_days")),
                mark,
            )
        )
    return rows


def checkpoints_html(state: dict[str, Any]) -> str:
    """Each job's checkpoints: the best one (by the docs' rule) marked with its reason, the name each was
    exported as (the deploy name) and the display name an export was given, how long it has before it expires, and the line that exports one."""
    parts = []
    for jid, v in state["jobs"].items():
        if v["checkpoints"]:
            parts.append(
                f"<b>checkpoints of {render.esc(jid)}</b>"
                + render.table(
                    [
                        "checkpoint",
                        "step",
                        "reward mean@1",
                        "loss",
                        "deploy name",
                        "display name",
                        "expires",
                        "",
                    ],
                    _checkpoint_rows(v),
                    raw_cols=(0, 7),
                )
                + f"<div><code>{render.esc(export_hint(jid, (v['best_checkpoint'] or {}).get('name')))}</code></div>"
            )
    return "".join(parts)


def samples_html(state: dict[str, Any]) -> str:
    """Each job's latest best and worst sample (tokens shaded by the teacher's disagreement)."""
    return "".join(
        samples_panel_html(jid, v["samples"]) for jid, v in state["jobs"].items() if v.get("samples")
    )


def logs_html(state: dict[str, Any]) -> str:
    """The log tail of each job (and, where there are no metrics, its recent events)."""
    parts = []
    for jid, v in state["jobs"].items():
        lines = v["log_tail"]
        if v["events"] and v["metrics_available"] is False:
            parts.append(
                f"<b>events of {render.esc(jid)}</b><pre>{render.esc(chr(10).join(v['events']))}</pre>"
            )
        if lines:  # folded: the alerts and the curves say what happened; the log says the details
            parts.append(
                f"<details><summary><b>log tail of {render.esc(jid)}</b> ({len(lines)} lines)</summary>"
                f"<pre>{render.esc(chr(10).join(lines))}</pre></details>"
            )
    return "".join(parts)


def snapshot_html(job_ids: list[str], state: dict[str, Any], chart_html: str) -> str:
    """The static snapshot: self-contained HTML, the chart (`chart_html`) an interactive page. Never
    "live": a snapshot of running jobs is read later, under the line that says as of when."""
    title = f"opd job monitor: {', '.join(job_ids)}"
    return (
        '<div class="opd-monitor-snap">'
        + render.box(
            status_html(state, seen_at=time.time())
            + notes_html(state)
            + alerts_html(state)
            + chart_html
            + samples_html(state)
            + checkpoints_html(state)
            + logs_html(state),
            title=title,
        )
        + "</div>"
    )


def snapshot_text(state: dict[str, Any]) -> str:
    """The plain-text view (a frontend without HTML, a log, a terminal)."""
    lines = list(state.get("notes") or [])
    for jid, v in state["jobs"].items():
        loss = latest_text(v, LOSS)
        lines.append(
            f"{jid}: {v['status']} step {steps_text(v['step'], v['total_steps'])} "
            f"epoch {epoch_text(v['epoch'], v['n_epochs'])}" + (f" loss {loss}" if loss else "")
        )
        lines += [f"  ! {a['message']} (fix: {a['fix']})" for a in v["alerts"]]
        if v["best_checkpoint"]:
            b = v["best_checkpoint"]
            lines.append(f"  best checkpoint: {b['name']} ({b['reason']})")
        elif v.get("best_note"):
            lines.append(f"  best checkpoint: {v['best_note']}")
        if v["metrics_available"] is False:
            lines.append(f"  {CLOUD_NOTE}")
        if v.get("meter"):
            lines.append(f"  {v['meter']}")
        samples = v.get("samples") or {}
        if samples.get("records"):
            lines.append(f"  samples of step {samples['step']}: %opd rollouts {jid} --step {samples['step']}")
        if v["error"]:
            lines.append(f"  error: {v['error']}")
        lines += [f"  | {line}" for line in v["log_tail"][-5:]]
    return "\n".join(lines)


def rich_table(state: dict[str, Any]) -> Any:
    """A rich table of the jobs (user text as ``Text``, never read as markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title="opd job monitor")
    for col in ("job", "status", "step", "epoch", "loss", "valid_token_rate", "reward mean@1", "alerts"):
        table.add_column(col)
    for jid, v in state["jobs"].items():
        table.add_row(
            Text(jid),
            Text(v["status"]),
            str(v["step"]),
            epoch_text(v["epoch"], v["n_epochs"]),
            latest_text(v, LOSS),
            latest_text(v, VALID_TOKEN_RATE),
            latest_text(v, REWARD_MEAN),
            Text("; ".join(a["message"] for a in v["alerts"])),
        )
    return table
