"""Saved snapshots that stay usable with no kernel: sortable tables and clickable samples.

A view's ``text/html`` is what a saved notebook (or its ``nbconvert --to html`` export) shows once the
kernel is gone. :func:`interactive` follows it with ``static/snapshot.js`` (ours, no library, no
network): a header click sorts the table, a row naming a sample shows that sample's pane, and token
shading keeps its hover tooltips (``title`` attributes need no script). Where a host strips scripts
(an untrusted notebook), the same HTML stays a static table, and its :func:`hint` line says how to
make it interactive.
"""

from __future__ import annotations

import html as _html
from functools import cache
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"
# What makes a saved view interactive again where a sanitizer dropped its scripts (an untrusted
# notebook: a fresh clone). One wording for the chart's static picture and the tables' hint line.
MAKE_INTERACTIVE = "trust the notebook (JupyterLab: Command Palette, Trust Notebook) or re-run this cell"


@cache
def static_js(name: str) -> str:
    """One of our scripts under ``static/`` (read once per process)."""
    return (STATIC / name).read_text(encoding="utf-8")


def interactive(html: str) -> str:
    """`html` in a root the snapshot script works inside, then the script (it finds the root as the
    element just before it, so snapshots never touch each other)."""
    return f'<div class="opd-snap">{html}</div><script>{static_js("snapshot.js")}</script>'


def hint(live: str, wanted: str) -> str:
    """A line on what a saved view does: `live` where its script runs (the script writes it); else,
    what a sanitizer left, that `wanted` needs the notebook trusted or the cell re-run."""
    return (
        f'<div class="opd-snap-hint" data-live="{_html.escape(live, quote=True)}"><small>'
        f"saved view: to {_html.escape(wanted)}, {_html.escape(MAKE_INTERACTIVE)}</small></div>"
    )
