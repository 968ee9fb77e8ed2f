"""A saved tutorial, exported with `jupyter nbconvert --to html`, keeps its charts interactive with no
kernel and no network: each chart is a self-contained page in an `<iframe srcdoc>` (our script and its
points inlined). Chromium opens the export with no host resolving at all, and hovering a curve shows
a tooltip with its step and value; a continued job's curve starts where its parent stopped. The
saved rollout viewer still sorts its table and shows the sample of a clicked row.

nbconvert's own page template links require.js and MathJax from a CDN; the export is run once as is
(those are its only remote references: the outputs add none) and once with both left out, which has
none at all.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM, chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "02_reward.ipynb"  # stage 2 continues stage 1; one monitor shows both
ARTIFACTS = Path(__file__).parent / "artifacts"
OFFLINE = ["--HTMLExporter.require_js_url=", "--HTMLExporter.mathjax_url="]
_REMOTE = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=[\"']((?:https?:)?//[^\"']+)", re.I)
_FRAME = re.compile(r'<iframe class="opd-chart-frame"[^>]*srcdoc="([^"]*)"')
_DATA = re.compile(r"opdChart\(document\.getElementById\('opd-chart'\), (\{.*\})\);</script>", re.S)


def _sort_and_pick_a_saved_sample(driver) -> None:  # noqa: ANN001
    """The saved rollout viewer: a click on "reward" sorts its rows, a click on a row shows that sample
    (its tokens keep their tooltips)."""
    from selenium.webdriver.common.by import By

    viewer = next(s for s in driver.find_elements(By.CSS_SELECTOR, ".opd-snap") if "rollouts of" in s.text)
    headers = viewer.find_element(By.CSS_SELECTOR, "table").find_elements(By.CSS_SELECTOR, "thead th")
    col = [h.text for h in headers].index("reward")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", headers[col])
    headers[col].click()

    def rewards() -> list[float]:
        cells = [
            r.find_elements(By.TAG_NAME, "td")[col].text
            for r in viewer.find_elements(By.CSS_SELECTOR, "tbody tr[data-sample]")
        ]
        return [float(c) for c in cells if c]

    assert len(rewards()) >= 2 and rewards() == sorted(rewards())
    headers[col].click()
    assert rewards() == sorted(rewards(), reverse=True)
    row = viewer.find_elements(By.CSS_SELECTOR, "tbody tr[data-sample]")[-1]
    row.click()
    pane = viewer.find_element(
        By.CSS_SELECTOR, f'.opd-sample[data-sample="{row.get_attribute("data-sample")}"]'
    )
    assert (
        pane.is_displayed()
        and sum(p.is_displayed() for p in viewer.find_elements(By.CSS_SELECTOR, ".opd-sample")) == 1
    )
    token = pane.find_element(By.CSS_SELECTOR, ".opd-tok")
    assert "teacher log p" in (token.get_attribute("title") or "")
    viewer.screenshot(str(ARTIFACTS / "rollouts_exported.png"))


def _export(out: Path, *flags: str) -> str:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "html",
            *flags,
            str(NOTEBOOK),
            "--output-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (out / f"{NOTEBOOK.stem}.html").read_text(encoding="utf-8")


def test_exported_charts_reference_nothing_remote_and_place_a_continued_job_after_its_parent(
    tmp_path: Path,
) -> None:
    from nbconvert import HTMLExporter

    plain = _export(tmp_path / "plain")
    template_own = {HTMLExporter.require_js_url.default_value, HTMLExporter.mathjax_url.default_value}
    assert set(_REMOTE.findall(plain)) <= template_own  # the outputs add no remote reference
    page = _export(tmp_path / "offline", *OFFLINE)
    assert _REMOTE.findall(page) == []
    charts = [html.unescape(f) for f in _FRAME.findall(page)]
    assert charts, "no chart in the exported notebook (was it executed with the interactive charts?)"
    for chart in charts:
        assert _REMOTE.findall(chart) == [] and "function opdChart" in chart
    docs = [json.loads(_DATA.search(c).group(1)) for c in charts]
    both = [d for d in docs if len({s["job"] for s in d["series"]}) == 2]
    assert both, "the stage 1 + stage 2 monitor's chart is missing"
    offsets = {s["job"]: s["offset"] for s in both[-1]["series"]}
    first, second = sorted(offsets, key=offsets.get)
    last_of_first = max(max(s["steps"]) for s in both[-1]["series"] if s["job"] == first)
    assert offsets[first] == 0 and 0 < offsets[second] <= last_of_first  # stage 2 starts after stage 1's step


@pytest.mark.skipif(not HAVE_CHROMIUM, reason=NO_CHROMIUM)
def test_an_exported_chart_shows_a_tooltip_with_no_kernel_and_no_network(tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    ARTIFACTS.mkdir(exist_ok=True)
    _export(tmp_path, *OFFLINE)
    driver = chromium(window="1300,1000")
    try:
        driver.get((tmp_path / f"{NOTEBOOK.stem}.html").as_uri())
        frames = driver.find_elements(By.CSS_SELECTOR, "iframe.opd-chart-frame")
        assert frames
        frame = frames[-1]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", frame)
        driver.switch_to.frame(frame)
        deadline = time.monotonic() + 30
        tip = ""
        while time.monotonic() < deadline and "step" not in tip:
            panel = driver.find_element(By.CSS_SELECTOR, "svg.opd-panel")
            ActionChains(driver).move_to_element_with_offset(panel, 20, 0).perform()
            shown = driver.find_element(By.CSS_SELECTOR, ".opd-tip")
            tip = shown.text if shown.is_displayed() else ""
            time.sleep(0.3)
        driver.find_element(By.CSS_SELECTOR, ".opd-chart").screenshot(
            str(ARTIFACTS / "chart_exported_hover.png")
        )
        assert "step" in tip and re.search(r"\d", tip), tip
        driver.switch_to.default_content()
        _sort_and_pick_a_saved_sample(driver)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "opd" in e["message"]]
        assert errors == [], errors
    finally:
        driver.quit()
