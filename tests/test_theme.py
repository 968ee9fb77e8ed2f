"""Views read in the host's light and dark themes: WCAG AA (4.5:1) for every status colour on the
background it is shown on, tints instead of light fills, and no colour written outside the one theme."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from opd_nb.views import render, theme

PACKAGE = Path(__file__).resolve().parents[1] / "opd_nb"
AA = 4.5


PAIRS = [
    *(("status", k, v) for k, v in theme.STATUS.items()),
    *(("span kind", k, v) for k, v in theme.SPAN_KIND.items()),
    *(("probe side", k, v) for k, v in theme.SIDES.items()),
]


@pytest.mark.parametrize(("palette", "name", "pair"), PAIRS, ids=[f"{p}-{n}" for p, n, _ in PAIRS])
def test_each_text_colour_passes_aa_on_the_background_it_is_shown_on(
    palette: str, name: str, pair: tuple[str, str]
) -> None:
    light, dark = pair
    assert theme.contrast(light, theme.LIGHT_BACKGROUND) >= AA, (palette, name)
    assert theme.contrast(dark, theme.DARK_BACKGROUND) >= AA, (palette, name)


@pytest.mark.parametrize("status", sorted(theme.STATUS))
def test_each_status_colour_has_its_dark_twin_in_every_hosts_style(status: str) -> None:
    _, dark = theme.STATUS[status]
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


_HEX_LITERAL = re.compile(r"[\"'=:]\s*#[0-9a-fA-F]{6}\b")
# pictures, not text on the host's page: the charts' series palette and the static picture's ink (its
# <img> is inverted under a dark theme), and the playground's matplotlib histogram (a PNG)
_PICTURES = {"plots/series.py", "plots/svg.py", "notebook/playground.py"}


def test_no_view_keeps_a_colour_of_its_own_outside_the_theme() -> None:
    """A colour kept in a view's own table (a span kind's label #8c959f: 3.0:1 on white; a check's
    warning #b26a00: 4.2:1) is one the theme never checks: every text colour is a theme pair."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "views/theme.py" or rel in _PICTURES or rel.startswith(("server/", "engine/")):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _HEX_LITERAL.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()[:100]}")
    assert offenders == []
