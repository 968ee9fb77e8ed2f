"""The kernel-side cost of one poll's chart update, and the saved snapshot's size.

The monitor's polling thread runs in the user's kernel beside the local job it shows, so what one
poll costs there matters. For 1, 10 and 10,000 new points (one metric of one step; ten metrics of one
step; ten metrics of 1,000 steps) it times, side by side in this one process:

* ``chart``: :class:`opd_nb.notebook.chart.MetricChart` taking the job's whole metric rows (as the
  client returns them) and assigning the new points to its widget, plus the JSON encoding the
  kernel's session does for that message (there is no kernel here, so it is done explicitly);
* ``png``: what the monitor did before, one matplotlib PNG of every point per update.

It prints the median of each, ``ratio_chart_vs_png`` per case, and the snapshot (``to_html``) size
of a 10,000-step job with 10 series (target < 1 MB).

    python bench/chart_update.py [--repeat 15] [--base 2000]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

METRICS = [f"metric/{i}" for i in range(10)]


def rows(first: int, last: int, metrics: list[str]) -> list[dict]:
    return [
        {"step": s, **{m: math.sin(s / 40 + i) + 1.5 for i, m in enumerate(metrics)}}
        for s in range(first, last + 1)
    ]


def chart_cost(base: int, new_steps: int, metrics: list[str]) -> tuple[float, int]:
    """Seconds for one poll that brings `new_steps` steps of `metrics` after `base` known steps."""
    from opd_nb.notebook.chart import MetricChart

    chart = MetricChart()
    history = rows(1, base, METRICS)
    chart.update({"ft-bench": history}, METRICS)
    widget = chart.widget()
    history = history + rows(base + 1, base + new_steps, metrics)
    t0 = time.perf_counter()
    sent = chart.update({"ft-bench": history}, METRICS)
    json.dumps({"method": "update", "state": {"delta": widget.delta}})
    return time.perf_counter() - t0, sent


def png_cost(base: int, new_steps: int, metrics: list[str]) -> float:
    from opd_nb.plots.png import render_png

    history = rows(1, base, METRICS) + rows(base + 1, base + new_steps, metrics)
    t0 = time.perf_counter()
    render_png({"ft-bench": history}, names=METRICS)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--base", type=int, default=2000, help="steps the chart already holds")
    args = parser.parse_args()
    cases = [
        ("1 new point", 1, METRICS[:1]),
        ("10 new points", 1, METRICS),
        ("10,000 new points", 1000, METRICS),
    ]
    chart_cost(10, 1, METRICS)  # warm imports (anywidget, traitlets) outside the timings
    png_cost(10, 1, METRICS)
    for name, steps, metrics in cases:
        chart_s, png_s, sent = [], [], 0
        for _ in range(args.repeat):  # interleaved, so both see the same machine
            seconds, sent = chart_cost(args.base, steps, metrics)
            chart_s.append(seconds)
            png_s.append(png_cost(args.base, steps, metrics))
        c, p = statistics.median(chart_s), statistics.median(png_s)
        print(
            f"{name:>18}: chart {c * 1e3:8.3f} ms ({sent} points sent)  png {p * 1e3:8.1f} ms  "
            f"ratio_chart_vs_png={c / p:.4f}"
        )

    from opd_nb.notebook.chart import MetricChart

    big = MetricChart()
    big.update({"ft-bench": rows(1, 10_000, METRICS)}, METRICS)
    snapshot = big.to_html()
    print(
        f"snapshot of 10,000 steps x 10 series: {len(snapshot.encode()) / 1e6:.3f} MB "
        f"(target < 1 MB; {big.feed.points:,} points held, {big.feed.max_points:,} shown per series)"
    )


if __name__ == "__main__":
    main()
