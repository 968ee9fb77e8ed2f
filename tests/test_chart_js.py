"""The chart's own behaviour in Chromium, on the page the saved snapshot uses (`chart_page`), with no
kernel and no network: panels and legend, hiding a job, global steps vs aligned at 0, log-y, zoom
(ctrl+wheel; a plain wheel scrolls the notebook), pan, reset, and live appends (a repeated poll adds
nothing). The JupyterLab path is tests/test_browser.py; the nbconvert export, tests/test_chart_export.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM, chromium

from opd_nb.chart_data import ChartFeed

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
