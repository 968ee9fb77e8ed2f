"""Small HTML helpers shared by the notebook results (static, self-contained HTML only)."""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from typing import Any

from opd_nb.views import theme

STYLE = (
    "<style>.opd-nb table{border-collapse:collapse;font-size:12px;margin:4px 0}"
    f".opd-nb td,.opd-nb th{{border:1px solid {theme.RULE};padding:2px 6px;text-align:left;vertical-align:top}}"
    f".opd-nb th{{background:{theme.TINT}}}{theme.status_css('.opd-nb')}"
    ".opd-nb pre{font-size:11px;margin:2px 0;white-space:pre-wrap}"
    f".opd-nb .opd-scroll th{{position:sticky;top:0}}{theme.inverted_in_dark('.opd-chart-img')}</style>"
)

SEVERITY_CLASS = {"error": "bad", "warning": "warn", "info": "", "ok": "ok"}


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def ranges(numbers: Iterable[int]) -> str:
    """Sorted whole numbers as runs ("0–192", "1, 4–6, 9"): a long step list stays one short line."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
        run = [n]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
    return ", ".join(out)


def fmt(value: Any) -> str:
    """A compact number or text for tables."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    raw_cols: Sequence[int] = (),
    row_data: Sequence[str] | None = None,
    text_cols: Sequence[int] = (),
) -> str:
    """An HTML table; cells are escaped except the columns listed in `raw_cols` (already HTML).
    `row_data`: a ``data-sample`` value per row (a snapshot's script shows that sample on a click).
    `text_cols`: columns a snapshot's script sorts as text even when they hold digits ("046")."""
    head = "".join(
        f'<th data-type="text">{esc(h)}</th>' if i in text_cols else f"<th>{esc(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = []
    for n, row in enumerate(rows):
        cells = []
        for i, cell in enumerate(row):
            cells.append(f"<td>{cell if i in raw_cols else esc(fmt(cell))}</td>")
        attr = f' data-sample="{esc(row_data[n])}"' if row_data is not None else ""
        body.append(f"<tr{attr}>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def png_img(png: bytes | None, *, alt: str = "metrics", width: int | None = None) -> str:
    """An <img> with the PNG embedded as base64, so it survives a saved/reopened notebook."""
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    w = f' width="{width}"' if width else ""
    return f'<img alt="{esc(alt)}"{w} src="data:image/png;base64,{data}"/>'


def box(inner: str, *, title: str | None = None) -> str:
    head = f"<b>{esc(title)}</b><br/>" if title else ""
    return f'<div class="opd-nb">{STYLE}{head}{inner}</div>'
