"""Views read in the host's light and dark themes: WCAG AA (4.5:1) for every status colour on the
background it is shown on, tints instead of light fills, and no colour written outside the one theme."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from opd_nb.views import render, theme

PACKAGE = Path(__file__).resolve().parents[1] / "opd_nb"
AA = 4.5


@pytest.mark.parametrize("status", sorted(theme.STATUS))
def test_each_status_colour_passes_aa_on_the_background_it_is_shown_on(status: str) -> None:
    light, dark = theme.STATUS[status]
    assert theme.contrast(light, theme.LIGHT_BACKGROUND) >= AA
    assert theme.contrast(dark, theme.DARK_BACKGROUND) >= AA
    for css in (render.STYLE, theme.STATUS_STYLE):  # the dark twin is there for every host's selector
        for selector in theme.DARK_SELECTORS:
            assert f"{selector} " in css and dark in css


def test_no_single_colour_could_do_both_so_text_colours_come_in_pairs() -> None:
    """Why the pairs: the luminance a colour needs for 4.5:1 on white and on #111 does not overlap."""
    greys = [f"#{v:02x}{v:02x}{v:02x}" for v in range(256)]
    both = [
        g
        for g in greys
        if theme.contrast(g, theme.LIGHT_BACKGROUND) >= AA and theme.contrast(g, theme.DARK_BACKGROUND) >= AA
    ]
    assert both == []


def test_the_static_pictures_text_reads_in_both_themes_once_inverted() -> None:
    """The picture's ink (#555) on white, and inverted (#aaa) on the dark theme's background."""
    assert theme.contrast("#555555", theme.LIGHT_BACKGROUND) >= AA
    assert theme.contrast("#aaaaaa", theme.DARK_BACKGROUND) >= AA
    assert "filter:invert(1)" in render.STYLE and ".opd-chart-img" in render.STYLE
    from opd_nb.notebook.chart import chart_html

    saved = chart_html({"series": [{"job": "j", "name": "loss", "points": [[1, 1.0], [2, 0.5]]}]})
    assert "filter:invert(1)" in saved  # the chart's saved form carries it on its own


_FIXED_COLOUR = re.compile(r"(?:background|color)\s*:\s*#[0-9a-fA-F]{3,6}\b")


def test_no_view_writes_a_fixed_text_or_fill_colour_outside_the_theme() -> None:
    """A light fill or a dark-on-light text colour written into one view is what made headers white on
    #f4f4f4 in the dark theme: every view's colours come from `views/theme.py`."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "theme.py" or "server" in path.parts or "engine" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _FIXED_COLOUR.search(line):
                offenders.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()[:100]}")
    assert offenders == []


def test_a_status_span_carries_its_own_style_for_widget_html_without_the_page_style() -> None:
    html = theme.status_span("bad", "3 invalid")
    assert html.startswith("<style>") and '<span class="opd-bad">3 invalid</span>' in html
    assert all(sel in html for sel in theme.DARK_SELECTORS)
