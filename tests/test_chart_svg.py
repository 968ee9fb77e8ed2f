"""The chart's static picture (chart_svg): what a sanitizing host (an untrusted notebook, GitHub) keeps
of a saved chart. One polyline per job and metric in the interactive chart's colours, downsampled so a
tutorial stays small, user text escaped, and an ``<img>`` with a ``data:`` URL (the form JupyterLab's
sanitizer lets through). Browsers drawing it: tests/test_browser.py (untrusted JupyterLab)."""

from __future__ import annotations

import math
import re
from urllib.parse import unquote

from opd_nb.plots.series import PALETTE, ChartFeed
from opd_nb.plots.svg import STATIC_POINTS, curves_img, curves_svg

LOSS, REWARD = "actor/distillation/loss", "validation/data/reward/mean@1"


def _document(steps: int = 2000) -> dict:
    feed = ChartFeed()
    feed.labels = {"ft-a": "stage 1 <b>", "ft-b": "stage 2"}
    feed.offsets = {"ft-b": float(steps)}
    for job in ("ft-a", "ft-b"):
        rows = [{"step": s, LOSS: math.exp(-s / 300) + 0.01 * math.sin(s)} for s in range(1, steps + 1)]
        rows += [{"step": s, REWARD: s / steps} for s in range(100, steps + 1, 100)]
        feed.update({job: rows}, [LOSS, REWARD])
    return feed.full()


def test_one_polyline_per_series_in_the_charts_colours_downsampled() -> None:
    svg = curves_svg(_document())
    lines = re.findall(
        r"<polyline fill='none' stroke='(#[0-9a-f]{6})' stroke-width='1.5' points='([^']*)'", svg
    )
    assert len(lines) == 4  # two jobs x two metrics
    # panel by panel, each job in its colour: the order the interactive chart's legend gives them
    assert [c for c, _ in lines] == [PALETTE[0], PALETTE[1], PALETTE[0], PALETTE[1]]
    for _, points in lines:
        n = len(points.split(",")) // 2
        assert 2 <= n <= STATIC_POINTS
    # stage 2 continues stage 1: its loss curve starts right of where stage 1's ends (global steps)
    xs = [[float(v) for v in points.split(",")[::2]] for _, points in lines[:2]]
    assert xs[1][0] >= xs[0][-1]
    assert "stage 1 &lt;b&gt;" in svg and "<b>" not in svg  # user text escaped
    assert "actor/distillation/loss" in svg and REWARD in svg


def test_the_picture_is_small_and_an_img_a_sanitizer_keeps() -> None:
    img = curves_img(_document())
    assert img.startswith('<img class="opd-chart-img" alt=') and 'src="data:image/svg+xml,' in img
    assert len(img) < 20_000  # 2 x 2000 points per metric: a few KB, whatever the job's length
    src = re.search(r'src="([^"]*)"', img).group(1)
    assert "#" not in src and "<" not in src and '"' not in src  # nothing ends the URL or the attribute early
    assert unquote(src.split(",", 1)[1]).startswith("<svg xmlns='http://www.w3.org/2000/svg'")


def test_nothing_to_draw_is_no_picture() -> None:
    assert curves_svg({"panels": [LOSS], "series": []}) == "" and curves_img({"series": []}) == ""
    one = ChartFeed()
    one.update({"ft-a": [{"step": 3, LOSS: 0.5}]}, [LOSS])  # a single point still draws (a range around it)
    assert "<polyline" in curves_svg(one.full())
