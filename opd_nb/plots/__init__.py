"""Metric charts: the series behind them (:mod:`.series`), PNG curves (:mod:`.png`) and a static SVG (:mod:`.svg`).

The tutorials call ``opd_nb.plots.summarize`` and ``render_png``, so those two are re-exported here.
"""

from __future__ import annotations

from opd_nb.plots.png import render_png, summarize

__all__ = ["render_png", "summarize"]
