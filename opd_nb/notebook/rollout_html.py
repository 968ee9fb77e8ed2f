"""Static HTML of rollout records: the viewer's table and sample pane, and the monitor's samples panel.

Pure functions of plain records (the engine's format, as the client returns it) and the viewer's
state, so the widget while it is live, the saved notebook's snapshot and the monitor show the same
fragments. Every piece of user text (prompts, completions, reward errors) goes through
``render.esc``; token shading comes from ``opd_nb.client.rollout_results``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opd_nb.client.rollout_results import LEGEND, summary, tokens_html
from opd_nb.notebook import snapshot
from opd_nb.views import render, theme

SNAPSHOT_SAMPLES = 64  # samples whose pane a saved viewer carries (each is a few KB of shaded tokens)
_SCROLL = "max-height:22em;overflow-y:auto"  # about 14 rows: a saved viewer's table scrolls in this
_PANE = "flex:1 1 0;min-width:0;border:1px solid #ddd;padding:4px 8px;margin:2px"


def _num(value: Any, spec: str = ".3g") -> str:
    return "" if value is None else format(value, spec)


def one_line(text: str, width: int) -> str:
    """A completion on one line, cut to `width` characters (newlines shown as ⏎)."""
    flat = text.replace("\r", "").replace("\n", "⏎")
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def messages_html(messages: Sequence[Mapping[str, Any]]) -> str:
    """The prompt turns (agentic: the whole trajectory, tool calls and results included), one line each,
    escaped."""
    from opd_nb.client.rollout_results import message_text, tool_calls_text

    lines = []
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        mark = "" if m.get("trained") is not True else " (trained)"
        text, calls = message_text(m), tool_calls_text(m)
        if calls:  # a tool turn: show the call(s) it made
            text = f"{text} → {calls}" if text else f"→ {calls}"
        lines.append(
            f"<div><b>{render.esc(m.get('role') or '?')}{mark}:</b> "
            f'<span style="white-space:pre-wrap">{render.esc(text)}</span></div>'
        )
    return "".join(lines)


def reward_html(record: Mapping[str, Any]) -> str:
    """What the reward said about a sample: score, metrics, status, error (and the sample's facts)."""
    s = summary(record)
    rows: list[tuple[str, Any]] = [
        ("reward score", _num(s["reward"]) or "—"),
        ("reward status", record.get("reward_status") or "—"),
    ]
    for key, value in sorted((record.get("reward_metrics") or {}).items()):
        rows.append((f"metric {key}", _num(value) if isinstance(value, int | float) else value))
    if record.get("rollout_status"):
        rows.append(("rollout status", record.get("rollout_status")))
    rows += [
        ("length", f"{s['length']} tokens"),
        ("truncated", "yes (hit max_length)" if s["truncated"] else "no"),
        ("mean log-ratio", _num(s["mean_log_ratio"], "+.3f") or "—"),
        ("kind · step", f"{s['kind']} · {s['step']}"),
        ("group · sample", f"{s['group']} · {s['sample']}"),
    ]
    body = "".join(f"<tr><th>{render.esc(k)}</th><td>{render.esc(render.fmt(v))}</td></tr>" for k, v in rows)
    table = f"<table><tbody>{body}</tbody></table>"
    error = s["reward_error"]
    err = f'<div class="bad"><b>error:</b> {render.esc(error)}</div>' if error else ""
    return table + err


def sample_html(record: Mapping[str, Any], trajectory: str = "") -> str:
    """One sample: its prompt and shaded completion, with the reward's verdict beside it (and its
    `trajectory`'s HTML below, when given)."""
    left = (
        messages_html(record.get("messages") or ())
        + "<div><b>completion</b> (hover a token for both log-probs)</div>"
        + tokens_html(record.get("tokens") or ())
    )
    return (
        '<div style="display:flex;flex-wrap:wrap;gap:4px">'
        f'<div style="{_PANE};flex-grow:3">{left}</div>'
        f'<div style="{_PANE};flex-grow:1">{reward_html(record)}</div></div>' + trajectory
    )


def table_html(
    records: Sequence[Mapping[str, Any]],
    order: Sequence[int],
    selected: int | None,
    *,
    clickable: bool = False,
) -> str:
    """The samples table in display order; the selected row is marked. `clickable`: each row names its
    sample (``data-sample``), so a saved snapshot's script can show that sample's pane."""
    rows = []
    for i in order:
        s = summary(records[i])
        mark = "▶" if i == selected else ""
        rows.append(
            (
                f"{mark}{i}",
                s["kind"],
                one_line(s["prompt"], 24),
                one_line(s["completion"], 60),
                _num(s["reward"]),
                s["length"],
                "yes" if s["truncated"] else "",
                _num(s["mean_log_ratio"], "+.3f"),
            )
        )
    return render.table(
        ["#", "kind", "prompt", "completion", "reward", "length", "truncated", "mean log-ratio"],
        rows,
        row_data=[str(i) for i in order] if clickable else None,
        text_cols=(1, 2, 3),
    )


def legend_html() -> str:
    return f'<div style="font-size:11px;{theme.MUTED}">{render.esc(LEGEND)}</div>'


def viewer_html(
    state: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    trajectory: Callable[[int], str] | None = None,
) -> str:
    """The viewer's static snapshot: where it stands, the table, the selected sample."""
    title = f"rollouts of {state['job_id']}"
    if state["note"]:
        return render.box(f"<i>{render.esc(state['note'])}</i>", title=title)
    if state["step"] is None:
        body = "<i>no rollouts recorded yet (the engine records them from the first step)</i>"
        return render.box(body, title=title)
    where = (
        f"step <b>{state['step']}</b> of {render.esc(', '.join(map(str, state['steps'])))} · "
        f"kind {render.esc(state['kind'] or 'all')} · sorted by {render.esc(state['sort_label'])}"
    )
    order, selected = state["order"], state["selected"]
    panes = list(order[:SNAPSHOT_SAMPLES])
    if selected is not None and selected not in panes:
        panes.append(selected)
    which = "all" if len(panes) >= len(order) else f"the first {SNAPSHOT_SAMPLES}"
    hint = snapshot.hint(
        f"saved view: click a column to sort, a row to show its sample below ({which} in this order)",
        "sort the table and show another sample",
    )
    table = table_html(records, order, selected, clickable=True)
    # the table scrolls in a box of its own, so the sample under it stays in sight
    parts = [
        f"<div>{where}</div>",
        legend_html(),
        hint,
        f'<div class="opd-scroll" style="{_SCROLL}">{table}</div>',
    ]
    for i in panes:
        shown = "" if i == selected else ' style="display:none"'
        pane = sample_html(records[i], trajectory(i) if trajectory else "")
        parts.append(f'<div class="opd-sample" data-sample="{i}"{shown}>{pane}</div>')
    return render.box("".join(parts), title=title)


def samples_panel_html(job_id: str, samples: Mapping[str, Any]) -> str:
    """The monitor's compact panel: the latest step's best and worst sample, and how to see them all."""
    head = f"<b>samples of {render.esc(job_id)}</b>"
    if samples.get("note"):
        return f"{head} <i>{render.esc(samples['note'])}</i>"
    records = samples.get("records") or []
    if not records:
        return ""
    step = samples.get("step")
    cards = []
    for label, i in (("best", samples["best"]), ("worst", samples["worst"])):
        s = summary(records[i])
        cards.append(
            f'<div style="{_PANE}"><b>{label}</b> · {render.esc(s["kind"])} · reward '
            f"{render.esc(_num(s['reward']) or '—')} · {s['length']} tokens"
            f"{' · <b>truncated</b>' if s['truncated'] else ''} · mean log-ratio "
            f"{render.esc(_num(s['mean_log_ratio'], '+.3f') or '—')}"
            f"<div><b>prompt:</b> {render.esc(one_line(s['prompt'], 80))}</div>"
            f"{tokens_html(records[i].get('tokens') or ())}</div>"
        )
    line = f"%opd rollouts {job_id} --step {step}"
    return (
        f"{head} (step {render.esc(step)}, {len(records)} recorded) — open them all with "
        f"<code>{render.esc(line)}</code>"
        f'<div style="display:flex;flex-wrap:wrap;gap:4px">{"".join(cards)}</div>'
    )
