"""The chart's own behaviour in Chromium, on the page the saved snapshot uses (`chart_page`), with no
kernel and no network: panels and legend, hiding a job, global steps vs aligned at 0, log-y, zoom
(ctrl+wheel; a plain wheel scrolls the notebook), pan, reset, and live appends (a repeated poll adds
nothing). The JupyterLab path is tests/test_browser.py; the nbconvert export, tests/test_chart_export.py.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest
from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM, chromium

from opd_nb.plots.series import ChartFeed

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PARENT, CHILD = "ft-202612010000-aaaaaa", "ft-202612010000-bbbbbb"
LOSS, REWARD = "actor/distillation/loss", "actor/reward/mean"


def _document() -> dict:
    """Two jobs, two metrics, 120 steps each; the second continues the first (offset 120); the reward
    has negative values (log-y must hide them and say so)."""
    feed = ChartFeed(title="stage 1 and stage 2")
    feed.labels = {PARENT: "stage 1", CHILD: "stage 2"}
    feed.offsets = {CHILD: 120.0}
    for job, shift in ((PARENT, 0.0), (CHILD, 0.5)):
        rows = [
            {"step": s, LOSS: 2 * math.exp(-s / 40) + shift, REWARD: math.sin(s / 9)} for s in range(1, 121)
        ]
        feed.update({job: rows}, [LOSS, REWARD])
    return feed.full()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from opd_nb.notebook.chart import chart_page

    if not HAVE_CHROMIUM:
        pytest.skip(NO_CHROMIUM)
    path = tmp_path_factory.mktemp("chart") / "chart.html"
    path.write_text(chart_page(_document()).replace("opdChart(document", "window.CHART = opdChart(document"))
    driver = chromium()
    driver.get(Path(path).as_uri())
    yield driver
    driver.quit()


def _state(driver) -> dict:  # noqa: ANN001
    return driver.execute_script("return CHART.state()")


def _first_x(driver, job: str, kind: str = "raw") -> float:  # noqa: ANN001
    d = driver.execute_script(
        f"return document.querySelector('svg.opd-panel path.opd-{kind}[data-job=\"{job}\"]').getAttribute('d')"
    )
    return float(re.match(r"M([-\d.]+),", d).group(1))


def _wheel(driver, panel, **keys: bool) -> None:  # noqa: ANN001
    driver.execute_script(
        "const p = arguments[0], r = p.getBoundingClientRect();"
        "p.dispatchEvent(new WheelEvent('wheel', Object.assign({deltaY: -300, clientX: r.left + r.width / 2,"
        " clientY: r.top + r.height / 2, bubbles: true, cancelable: true}, arguments[1])))",
        panel,
        keys,
    )


def test_panels_legend_align_and_log_y(page) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    panels = page.find_elements(By.CSS_SELECTOR, "svg.opd-panel")
    assert [p.get_attribute("data-metric") for p in panels] == [LOSS, REWARD]
    assert page.find_element(By.CSS_SELECTOR, ".opd-chart").get_attribute("data-points") == "480"
    legend = page.find_elements(By.CSS_SELECTOR, ".opd-legend-item")
    assert [i.text.strip() for i in legend] == ["stage 1", "stage 2"]

    legend[0].click()  # hide stage 1 in every panel, then show it again
    assert page.find_elements(By.CSS_SELECTOR, f'path.opd-line[data-job="{PARENT}"]') == []
    assert _state(page)["hidden"] == [PARENT]
    legend[0].click()
    assert len(page.find_elements(By.CSS_SELECTOR, f'path.opd-line[data-job="{PARENT}"]')) == 2

    assert _state(page)["xdomain"][1] == 240  # stage 2 at its global steps, after stage 1
    placed = _first_x(page, CHILD)
    page.find_element(By.CSS_SELECTOR, "input.opd-align").click()
    assert _state(page)["align"] and _state(page)["xdomain"][1] == 120
    assert _first_x(page, CHILD) < placed and abs(_first_x(page, CHILD) - _first_x(page, PARENT)) < 1
    page.find_element(By.CSS_SELECTOR, "input.opd-align").click()

    page.find_element(By.CSS_SELECTOR, "input.opd-logy").click()
    warn = page.find_element(By.CSS_SELECTOR, f'svg.opd-panel[data-metric="{REWARD}"] .opd-warn').text
    assert re.fullmatch(r"\d+ ≤0 values hidden", warn), warn
    page.find_element(By.CSS_SELECTOR, "input.opd-logy").click()
    assert page.find_elements(By.CSS_SELECTOR, ".opd-warn") == []


def test_a_replacement_changes_a_held_points_value_and_adds_none(page) -> None:  # noqa: ANN001
    """A live step's running total sent again (`replace`): the point at that step takes the new value,
    the count stays, and the drawn line follows."""
    from selenium.webdriver.common.by import By

    chart = page.find_element(By.CSS_SELECTOR, ".opd-chart")
    before = int(chart.get_attribute("data-points"))
    path = f'svg.opd-panel[data-metric="{REWARD}"] path.opd-raw[data-job="{PARENT}"]'
    drawn = page.find_element(By.CSS_SELECTOR, path).get_attribute("d")
    page.execute_script(
        "CHART.append([arguments[0]]); CHART.state()",
        {"job": PARENT, "metric": REWARD, "steps": [60], "values": [5.0], "replace": True},
    )
    held = page.execute_script("return CHART.series(arguments[0], arguments[1])", PARENT, REWARD)
    assert held["values"][held["steps"].index(60)] == 5.0
    assert int(chart.get_attribute("data-points")) == before
    assert page.find_element(By.CSS_SELECTOR, path).get_attribute("d") != drawn


def test_the_live_widget_folds_a_replacement_into_its_saved_data_in_place(page) -> None:  # noqa: ANN001
    """The live chart keeps every delta in its own `data` (what a saved notebook restores): a replacement
    changes the value at its step and adds no point, and no `replace` mark is left on the series."""
    from opd_nb.notebook.chart import _GLUE

    merge = _GLUE[: _GLUE.index("export default")]
    doc = {"series": [{"job": "j", "metric": "m", "steps": [1, 2], "values": [0.1, 0.2]}]}
    deltas = [
        {"job": "j", "metric": "m", "steps": [2], "values": [0.9], "replace": True},
        {"job": "j", "metric": "m", "steps": [3], "values": [0.3]},
        {"job": "k", "metric": "m", "steps": [1], "values": [1.0], "replace": True},  # nothing held: ignored
    ]
    out = page.execute_script(merge + "return opdMerge(arguments[0], arguments[1], 7);", doc, deltas)
    assert out["seq"] == 7 and len(out["series"]) == 1
    (series,) = out["series"]
    assert (series["steps"], series["values"]) == ([1, 2, 3], [0.1, 0.9, 0.3]) and "replace" not in series


def test_zoom_pan_and_reset(page) -> None:  # noqa: ANN001
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    panel = page.find_element(By.CSS_SELECTOR, "svg.opd-panel")
    full = _state(page)["xdomain"]
    _wheel(page, panel)  # a plain wheel scrolls the page: the chart must not trap it
    assert _state(page)["xdomain"] == full and not _state(page)["zoomed"]
    _wheel(page, panel, ctrlKey=True)  # ctrl+wheel (and a trackpad pinch) zooms around the cursor
    zoomed = _state(page)
    assert zoomed["zoomed"] and zoomed["xdomain"][1] - zoomed["xdomain"][0] < full[1] - full[0]
    assert page.find_element(By.CSS_SELECTOR, ".opd-range").text.startswith("steps ")
    ActionChains(page).move_to_element(panel).click_and_hold().move_by_offset(60, 0).release().perform()
    panned = _state(page)["xdomain"]
    assert panned[0] < zoomed["xdomain"][0]
    assert abs((panned[1] - panned[0]) - (zoomed["xdomain"][1] - zoomed["xdomain"][0])) < 1e-6
    page.find_element(By.CSS_SELECTOR, "button.opd-reset").click()
    assert _state(page)["xdomain"] == full and not _state(page)["zoomed"]


def test_appends_extend_the_curves_and_a_repeated_poll_adds_nothing(page) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    chart = page.find_element(By.CSS_SELECTOR, ".opd-chart")
    before = int(chart.get_attribute("data-points"))
    new = {"job": CHILD, "metric": LOSS, "steps": list(range(121, 131)), "values": [0.5] * 10}
    page.execute_script("CHART.append([arguments[0]]); CHART.state()", new)
    assert int(chart.get_attribute("data-points")) == before + 10 and _state(page)["xdomain"][1] == 250
    page.execute_script("CHART.append([arguments[0]]); CHART.state()", {**new, "values": [9.0] * 10})
    assert int(chart.get_attribute("data-points")) == before + 10  # the same steps again: ignored
    fresh = {"job": "ft-202612010000-cccccc", "metric": "trace/new", "steps": [1, 2], "values": [1.0, 2.0]}
    page.execute_script("CHART.append([arguments[0]]); CHART.state()", fresh)
    assert (
        page.find_elements(By.CSS_SELECTOR, "svg.opd-panel")[-1].get_attribute("data-metric") == "trace/new"
    )
    severe = [e for e in page.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe


def _open(  # noqa: ANN202
    doc: dict, tmp_path: Path, window: str, *, host: bool = False, width: int | None = None, body: str = ""
):
    """A Chromium page of `doc`: the chart page itself (`width`: as wide as a notebook's output area
    is in that window), or (`host`) a notebook-like page holding the saved snapshot's HTML (the frame,
    its static picture and the script that sizes the frame)."""
    from opd_nb.notebook.chart import chart_html, chart_page

    if not HAVE_CHROMIUM:
        pytest.skip(NO_CHROMIUM)
    path = tmp_path / "page.html"
    if host:
        path.write_text(
            f"<!doctype html><html><body style='margin:8px' {body}>{chart_html(doc)}<p>after</p></body></html>"
        )
    else:
        page = chart_page(doc).replace("opdChart(document", "window.CHART = opdChart(document")
        if width:
            page = page.replace('<body style="margin:0;', f'<body style="margin:0;max-width:{width}px;', 1)
        path.write_text(page)
    driver = chromium(window=window)
    driver.get(path.as_uri())
    return driver


def _long_labels(n: int, steps: int = 60) -> dict:
    """`n` jobs labelled as compare labels them: every value that differs, then the job's name."""
    feed = ChartFeed()
    for k in range(n):
        job = f"ft-20261201000{k}-abcdef"
        values = ", ".join(
            f"{name}={value}"
            for name, value in (
                ("learning_rate", f"5.0e-0{k + 1}"),
                ("kl_coef", f"0.0{k}"),
                ("n_rollouts", 16 * (k + 1)),
                ("max_length", 4096),
                ("max_prompt_length", 1024),
                ("temperature", f"0.{k + 5}"),
                ("ppo_mini_batch_size", 64),
            )
        )
        feed.labels[job] = f"{values} (a-rather-long-job-name-for-the-sweep-{k})"
        rows = [{"step": s, LOSS: 1 / s + k, REWARD: math.sin(s / 7 + k)} for s in range(1, steps + 1)]
        feed.update({job: rows}, [LOSS, REWARD])
    return feed.full()


@pytest.mark.parametrize(("window", "width", "jobs"), [("700,900", None, 2), ("1400,900", 990, 6)])
def test_the_tooltip_stays_inside_the_chart(
    tmp_path: Path, window: str, width: int | None, jobs: int
) -> None:
    """Long legend labels (a compare of several values) wrap inside the tooltip, which stays within the
    chart wherever the cursor is, the right edge included (a 700 px window; a 1400 px JupyterLab window,
    whose output area is about 990 px wide, with six jobs compared)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    driver = _open(_long_labels(jobs), tmp_path, window, width=width)
    try:
        chart = driver.find_element(By.CSS_SELECTOR, ".opd-chart")
        panels = driver.find_elements(By.CSS_SELECTOR, "svg.opd-panel")
        for panel in (panels[0], panels[-1]):
            width = panel.size["width"]
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", panel)
            for x in (-width // 2 + 70, 0, width // 2 - 20):  # left, middle, the right edge
                ActionChains(driver).move_to_element_with_offset(panel, x, 0).perform()
                tip = driver.find_element(By.CSS_SELECTOR, ".opd-tip")
                assert tip.is_displayed() and "step" in tip.text
                box = driver.execute_script(
                    "const t = arguments[0].getBoundingClientRect(), c = arguments[1].getBoundingClientRect();"
                    "return [t.left, t.right, c.left, c.right, window.innerWidth]",
                    tip,
                    chart,
                )
                left, right, c_left, c_right, inner = box
                assert c_left - 0.5 <= left and right <= min(c_right, inner) + 0.5, (x, box)
        driver.save_screenshot(str(tmp_path / "tip.png"))
    finally:
        driver.quit()


def test_the_read_out_names_only_the_series_under_the_cursor(page) -> None:  # noqa: ANN001
    """Over stage 2's steps, stage 1 (ended at step 120) is not in the tooltip at its last point, and the
    other way round; where both run (aligned at 0), both are (issue 49: "step 16" while hovering 27)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    page.find_element(By.CSS_SELECTOR, "button.opd-reset").click()
    panel = page.find_element(By.CSS_SELECTOR, "svg.opd-panel")
    width = panel.size["width"]

    def tip_at(fraction: float) -> str:
        ActionChains(page).move_to_element_with_offset(panel, int(width * (fraction - 0.5)), 0).perform()
        return page.find_element(By.CSS_SELECTOR, ".opd-tip").text

    late, early = tip_at(0.85), tip_at(0.2)
    assert "stage 2" in late and "stage 1" not in late, late
    assert "stage 1" in early and "stage 2" not in early, early
    page.find_element(By.CSS_SELECTOR, "input.opd-align").click()
    try:
        both = tip_at(0.5)
        assert "stage 1" in both and "stage 2" in both, both
    finally:
        page.find_element(By.CSS_SELECTOR, "input.opd-align").click()


def test_a_zoom_keeps_the_smoothed_line_inside_and_names_whole_steps(tmp_path: Path) -> None:
    """Zoomed into the flat end of a curve that fell steeply, the smoothed line (which still carries the
    fall) stays inside the plot; the zoom's edges and the x ticks are whole steps."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    feed = ChartFeed()
    rows = [{"step": s, LOSS: 10.0 if s <= 20 else 1.0 + 0.01 * math.sin(s)} for s in range(1, 101)]
    feed.update({PARENT: rows}, [LOSS])
    doc = {**feed.full(), "smoothing": 0.95}
    driver = _open(doc, tmp_path, "1200,900")
    try:
        panel = driver.find_element(By.CSS_SELECTOR, "svg.opd-panel")
        # shift-drag across the steps just after the fall: a range selection
        width = panel.size["width"]
        ActionChains(driver).move_to_element_with_offset(panel, int(-width * 0.12), 0).key_down(
            "\ue008"
        ).click_and_hold().move_by_offset(int(width * 0.1), 0).release().key_up("\ue008").perform()
        state = _state(driver)
        assert state["zoomed"], state
        assert re.fullmatch(
            r"steps \d+–\d+|step \d+", driver.find_element(By.CSS_SELECTOR, ".opd-range").text
        )
        ys = driver.execute_script(
            "const p = document.querySelector('svg.opd-plot'), d = p.querySelector('path.opd-line').getAttribute('d');"
            "return [p.getAttribute('height'), d.slice(1).split('L').map((xy) => parseFloat(xy.split(',')[1]))]"
        )
        height, points = float(ys[0]), ys[1]
        assert points and all(-0.5 <= y <= height + 0.5 for y in points), (height, min(points), max(points))
        for _ in range(6):  # zoom far in: still whole steps on the x axis and in the range
            _wheel(driver, panel, ctrlKey=True)
        labels = driver.execute_script(
            "return [...document.querySelectorAll('svg.opd-panel text.opd-tick[text-anchor=middle]')].map(t => t.textContent)"
        )
        assert labels and all(re.fullmatch(r"-?\d+", t) for t in labels), labels
        assert re.fullmatch(
            r"steps \d+–\d+|step \d+|between steps \d+ and \d+",
            driver.find_element(By.CSS_SELECTOR, ".opd-range").text,
        )
    finally:
        driver.quit()


def test_colours_come_from_the_document(page) -> None:  # noqa: ANN001
    """The legend's colours are the document's palette, in order (the static picture uses the same)."""
    from selenium.webdriver.common.by import By

    from opd_nb.plots.series import PALETTE

    swatches = [
        s.value_of_css_property("background-color")
        for s in page.find_elements(By.CSS_SELECTOR, ".opd-legend-item .opd-swatch")
    ]
    rgba = [f"rgba({int(c[1:3], 16)}, {int(c[3:5], 16)}, {int(c[5:7], 16)}, 1)" for c in PALETTE]
    assert swatches and swatches == rgba[: len(swatches)]


@pytest.mark.parametrize("window", ["480,900", "1400,900"])
def test_the_saved_frame_takes_its_page_height(tmp_path: Path, window: str) -> None:
    """The saved chart's frame is as tall as the chart it holds, in a narrow window (one column of
    panels, taller) and a wide one, and for a compare's long legend: no scroll area inside, no blank
    band below. Where the script runs, the static picture is hidden."""
    from selenium.webdriver.common.by import By

    driver = _open(_long_labels(6), tmp_path, window, host=True)
    try:
        frame = driver.find_element(By.CSS_SELECTOR, "iframe.opd-chart-frame")
        assert not driver.find_element(By.CSS_SELECTOR, ".opd-chart-static").is_displayed()

        def settled() -> tuple[float, float]:
            outer = frame.size["height"]
            driver.switch_to.frame(frame)
            try:
                inner, scroll, client = driver.execute_script(
                    "return [document.getElementById('opd-chart').getBoundingClientRect().height,"
                    " document.documentElement.scrollHeight, document.documentElement.clientHeight]"
                )
            finally:
                driver.switch_to.default_content()
            return outer, inner, scroll - client

        deadline = time.monotonic() + 10
        while True:
            outer, inner, overflow = settled()
            if abs(outer - inner) <= 8 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert abs(outer - inner) <= 8 and overflow <= 0, (outer, inner, overflow)
    finally:
        driver.quit()


@pytest.mark.parametrize(
    ("body", "scheme"),
    [
        ('data-jp-theme-light="false" style="background:#111;color:#ddd"', "dark"),  # JupyterLab Dark
        ('class="vscode-dark" style="background:#1e1e1e;color:#ddd"', "dark"),  # VS Code's dark theme
        ('data-jp-theme-light="true"', "light"),
    ],
)
def test_the_saved_frame_follows_the_hosts_theme(tmp_path: Path, body: str, scheme: str) -> None:
    """The chart's frame cannot see the notebook's theme: the host script tells it, and its text (the
    chart draws in currentColor) is then light on dark, or dark on light, AA either way."""
    from selenium.webdriver.common.by import By

    from opd_nb.views import theme

    driver = _open(_document(), tmp_path, "1200,1600", host=True, body=body)
    try:
        frame = driver.find_element(By.CSS_SELECTOR, "iframe.opd-chart-frame")
        deadline = time.monotonic() + 10
        while True:
            driver.switch_to.frame(frame)
            try:
                got, colour = driver.execute_script(
                    "const c = getComputedStyle(document.querySelector('.opd-chart')).color;"
                    "return [document.documentElement.style.colorScheme, c]"
                )
            finally:
                driver.switch_to.default_content()
            if got == scheme or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert got == scheme, (got, colour)
        rgb = "#" + "".join(f"{int(v):02x}" for v in re.findall(r"\d+", colour)[:3])
        ground = theme.DARK_BACKGROUND if scheme == "dark" else theme.LIGHT_BACKGROUND
        assert theme.contrast(rgb, ground) >= 4.5, (rgb, ground)
    finally:
        driver.quit()
