"""End to end in a real browser: JupyterLab (headless) + Chromium driven by Selenium, no network.

A notebook loads the extension, targets a local control plane, shows the config form and the reward
playground, and submits a job with `%opd submit --job-name`: the job monitor must render, its chart
must render, and once the job reaches SUCCEEDED the output becomes the
monitor's snapshot (no widget left in it): the chart a self-sized frame whose legend names the job by
its name, with a hover tooltip. `%opd rollouts` opens the viewer; `%opd watch` of the finished job shows
its snapshot at once; a second job is still running when the notebook is saved: its live chart gains
points poll by poll and answers hover and smoothing. Then, as a user would the next day:

* the kernel is shut down and the page reloaded: no "Error displaying widget" anywhere; the finished
  monitors are their snapshots (chart visible and hoverable, checkpoint table visible), and the views
  that were still live come back from the widget state saved with the notebook (binder/'s setting);
* the same file in Notebook 7;
* a committed-style copy (untrusted, as after a clone): JupyterLab strips scripts and frames, and
  every monitor still shows its curves as a static picture, with the line saying how to get the
  interactive chart; trusted, the charts are interactive again.

Screenshots land in tests/artifacts/. Chromium resolves no host but 127.0.0.1, and each page is
checked to have loaded nothing from anywhere else.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM
from conftest import stop_jobs
from jupyter_browser import (
    ARTIFACTS,
    LOSS_PANEL,
    WIDGET_ERROR,
    Lab,
    hover,
    hover_frame,
    jupyter_lab,
    probe_widgets,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PROBE = "widgets ready"
JOB_NAME = "e2e-sorter"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# The notebook's cells, by what they show (indices into the notebook).
FORM, PLAYGROUND, MONITOR, VIEWER, WATCHED, LIVE = 3, 4, 5, 6, 7, 8
LONG_JOB = ("n_epochs=100", "batch_size=1", "ppo_mini_batch_size=2", "eval_steps=100", "save_steps=100000")


def _notebook(workspace: str, api_base: str) -> dict:
    cells = [
        f"import ipywidgets\nipywidgets.Label({PROBE!r})",  # the widget manager is listening (see _probe)
        "%load_ext opd_nb",
        f"%opd use local --base-url {api_base}",
        f"%opd form {workspace}",
        f"pg = %opd playground {workspace}\n"
        "pg.score('<think>n</think>' + pg.samples[0]['rollout_extra']['solution'])\npg",
        f"monitor = %opd submit {workspace} --job-name {JOB_NAME}\nmonitor",
        "monitor.wait(timeout_s=1800)\n"
        "viewer = %opd rollouts {monitor.job_ids[0]} --kind validation --sort ratio_asc\nviewer",
        "%opd watch {monitor.job_ids[0]}",  # a finished job: its snapshot at once
        # still running when the notebook is saved (cancelled by the test afterwards): 1,600 steps
        f"live = %opd submit {workspace} --job-name e2e-live "
        + " ".join(f"--set training.hyper_parameters.{kv}" for kv in LONG_JOB)
        + "\nlive",
    ]
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"c{i}",
                "metadata": {},
                "outputs": [],
                "source": c,
            }
            for i, c in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, local_server) -> Any:
    from conftest import tiny_workspace

    if not HAVE_CHROMIUM:
        pytest.skip(NO_CHROMIUM)
    ARTIFACTS.mkdir(exist_ok=True)
    tmp = tmp_path_factory.mktemp("browser")
    root = tmp / "nb"
    root.mkdir()
    # 12 steps, a checkpoint every 4: on a loaded machine a step took 10 s. The chart is seen growing on
    # the second job, which runs until the test cancels it.
    tiny_workspace("reward", root / "sorter", train_rows=16, n_epochs=6, eval_steps=4, save_steps=4)
    (root / "e2e.ipynb").write_text(json.dumps(_notebook("sorter", local_server.api_base)))
    # no save hook: a server from another environment (the live views saved as their widgets)
    with jupyter_lab(root, tmp, save_hook=False) as opened:
        yield opened


@pytest.fixture(scope="module")
def saved(lab: Lab, local_server) -> dict:
    """What the live run saw, and the notebook as JupyterLab saved it (filled by the first test)."""
    return {}


def _cell(lab: Lab, index: int) -> Any:
    return lab.css(".jp-Notebook .jp-Cell")[index]


def _outputs(lab: Lab, index: int) -> Any:
    from selenium.webdriver.common.by import By

    return _cell(lab, index).find_element(By.CSS_SELECTOR, ".jp-OutputArea")


def _in_output(lab: Lab, index: int, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return _outputs(lab, index).find_elements(By.CSS_SELECTOR, selector)


def _snapshot_chart(lab: Lab, index: int) -> Any:
    """The monitor snapshot's chart frame in cell `index`, once its page has sized it."""

    def sized() -> Any:
        # Notebook 7 may leave a cell far below the window unrendered: bring it into view while waiting
        lab.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", _cell(lab, index))
        frames = _in_output(lab, index, ".opd-monitor-snap iframe.opd-chart-frame")
        return frames[0] if frames and frames[0].is_displayed() and frames[0].size["height"] > 100 else None

    return lab.wait_for(sized, 60, f"the chart of cell {index}'s snapshot")


def _hover_and_smooth(lab: Lab, chart: Any, shots: Path) -> None:
    """Hover the live chart (`chart()` finds it again on every use: a render may replace it), then move
    the smoothing slider from 0 to 0.95: the smoothed line's path changes (at 0 it is the raw one)."""
    from selenium.webdriver.common.by import By

    lab.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart())
    time.sleep(0.5)
    tip = hover(lab, chart, shots.with_name(shots.name + "_hover.png"))
    assert "step" in tip, tip

    def slide(value: float) -> None:
        lab.driver.execute_script(
            "const s = arguments[0]; s.value = arguments[1];"
            "s.dispatchEvent(new Event('input', {bubbles: true}));",
            chart().find_element(By.CSS_SELECTOR, "input.opd-smoothing"),
            value,
        )

    def line_d() -> str:
        return chart().find_element(By.CSS_SELECTOR, f"{LOSS_PANEL} path.opd-line").get_attribute("d") or ""

    def raw_d() -> str:
        return chart().find_element(By.CSS_SELECTOR, f"{LOSS_PANEL} path.opd-raw").get_attribute("d") or ""

    slide(0)
    lab.wait_for(lambda: line_d() == raw_d(), 10, "the smoothed line to equal the raw one at 0")
    slide(0.95)
    lab.wait_for(lambda: line_d() not in ("", raw_d()), 10, "the smoothing slider to redraw the line")
    chart().screenshot(str(shots.with_name(shots.name + "_smoothed.png")))


def _no_widget_errors(lab: Lab, settle: float = 4.0) -> None:
    """No output says "Error displaying widget" (given the widget manager time to decide)."""
    time.sleep(settle)
    text = lab.outputs_text()
    assert WIDGET_ERROR not in text, text[text.index(WIDGET_ERROR) - 200 :][:600]


@pytest.mark.timeout(2400)  # on a loaded two-core machine a tiny step once took 50 s
def test_notebook_monitor_in_chromium(lab: Lab, saved: dict, local_server) -> None:
    from selenium.webdriver.common.by import By

    lab.open("lab/tree/e2e.ipynb")
    probe_widgets(lab, PROBE)

    def first_opd_cell_ran() -> bool:
        prompts = lab.css(".jp-Notebook .jp-Cell .jp-InputPrompt")
        return prompts[1].text.strip() not in ("", "[ ]:")  # [0] is the probe, already run

    # On a loaded machine the kernel could still be connecting when the indicator first said idle,
    # and then Run All passes over the cells without running one (failure.png: every prompt
    # "[ ]:"). Nothing ran, so running them all again is safe.
    for _ in range(3):
        lab.menu("Run", "Run All Cells")
        end = time.monotonic() + 20
        while time.monotonic() < end and not first_opd_cell_ran():
            time.sleep(0.5)
        if first_opd_cell_ran():
            break
    lab.wait_for(first_opd_cell_ran, 10, "the first %opd cell to run")

    form = lab.wait_for(
        lambda: lab.driver.find_element(By.CSS_SELECTOR, ".opd-config-form"), 90, "the config form"
    )
    assert "learning_rate" in form.text
    playground = lab.wait_for(
        lambda: lab.driver.find_element(By.CSS_SELECTOR, ".opd-reward-playground"),
        60,
        "the reward playground",
    )
    lab.driver.execute_script("arguments[0].scrollIntoView()", form)
    form.screenshot(str(ARTIFACTS / "config_form.png"))
    lab.driver.execute_script("arguments[0].scrollIntoView()", playground)
    playground.screenshot(str(ARTIFACTS / "reward_playground.png"))

    def live_monitor() -> Any:
        errors = [
            e.text
            for e in lab.css(".jp-OutputArea-output")
            if "UsageError" in e.text or "Traceback" in e.text
        ]
        if errors:
            lab.driver.save_screenshot(str(ARTIFACTS / "failure.png"))
            pytest.fail("a cell failed: " + errors[0][:1000])
        return _in_output(lab, MONITOR, ".opd-job-monitor") or _in_output(lab, MONITOR, ".opd-monitor-snap")

    lab.wait_for(live_monitor, 180, "the job monitor")

    def ended() -> bool:
        """The job ended and the output became the snapshot."""
        snap = _in_output(lab, MONITOR, ".opd-monitor-snap")
        return bool(snap) and "SUCCEEDED" in snap[0].text

    lab.wait_for(ended, 1800, "the monitor's snapshot with the job SUCCEEDED")
    assert not _in_output(lab, MONITOR, ".opd-job-monitor"), "the ended monitor still shows its widget"
    snap = _in_output(lab, MONITOR, ".opd-monitor-snap")[0]
    assert "%opd rollouts" in snap.text  # the samples panel says how to open the viewer
    assert "submitted" in snap.text and "(RUNNING)" not in snap.text  # the submit's note, not a stale status
    frame = _snapshot_chart(lab, MONITOR)
    assert not any(
        i.is_displayed() for i in _in_output(lab, MONITOR, ".opd-chart-static")
    )  # trusted: the chart
    tip, legend, spare = hover_frame(lab, frame, ARTIFACTS / "chart_snapshot_hover.png")
    assert "step" in tip and JOB_NAME in legend and "ft-" not in legend, (tip, legend)
    assert abs(spare) <= 8, f"the frame is {spare:+.0f} px off its page's height"
    lab.driver.execute_script("arguments[0].scrollIntoView()", snap)
    time.sleep(0.5)
    snap.screenshot(str(ARTIFACTS / "job_monitor.png"))

    # The rollout viewer on the finished job: pick a sample, see its shaded tokens.
    viewer = lab.wait_for(
        lambda: lab.driver.find_element(By.CSS_SELECTOR, ".opd-rollout-viewer"), 300, "the viewer"
    )
    assert "rollouts of" in viewer.text and "validation" in viewer.text
    options = viewer.find_elements(By.CSS_SELECTOR, "select option")
    assert len(options) >= 2, viewer.text
    before = viewer.find_element(By.CSS_SELECTOR, ".opd-completion").get_attribute("innerHTML")
    options[1].click()
    lab.wait_for(
        lambda: viewer.find_element(By.CSS_SELECTOR, ".opd-completion").get_attribute("innerHTML") != before,
        30,
        "the selected sample to change",
    )
    tokens = viewer.find_elements(By.CSS_SELECTOR, ".opd-completion .opd-tok")
    assert tokens and "teacher log p" in (tokens[0].get_attribute("title") or "")
    lab.driver.execute_script("arguments[0].scrollIntoView()", viewer)
    time.sleep(0.5)
    viewer.screenshot(str(ARTIFACTS / "rollout_viewer.png"))

    # `%opd watch` of the finished job: the snapshot straight away, never a widget.
    _snapshot_chart(lab, WATCHED)
    assert not _in_output(lab, WATCHED, ".opd-job-monitor")

    # The second job runs on: its live chart answers hover and smoothing.
    def live_chart() -> Any:
        return _in_output(lab, LIVE, ".opd-job-monitor .opd-chart")[0]

    points_seen: list[int] = []

    def live_points() -> int:
        failed = [o.text for o in _in_output(lab, LIVE, ".jp-OutputArea-output") if "Error" in o.text]
        if failed:
            pytest.fail("the second submit failed: " + failed[0][:1000])
        with contextlib.suppress(IndexError):
            points_seen.append(int(live_chart().get_attribute("data-points") or 0))
            return points_seen[-1]
        return 0

    def three_steps() -> bool:  # smoothing shows only on a curve of a few points
        d = live_chart().find_element(By.CSS_SELECTOR, f"{LOSS_PANEL} path.opd-raw").get_attribute("d") or ""
        return live_points() > 0 and d.count("L") >= 2

    def grew() -> bool:  # seen at two sizes at least: points arrive poll by poll
        return three_steps() and len(set(points_seen) - {0}) >= 2

    lab.wait_for(grew, 900, "the running job's chart to hold three steps and grow")
    assert points_seen == sorted(points_seen), f"the chart lost points: {points_seen}"
    _hover_and_smooth(lab, live_chart, ARTIFACTS / "chart_live")

    # Saved while that job runs: finished views as snapshots only, the live ones with their state.
    held = live_points()
    nb = lab.save("e2e.ipynb")
    cells = nb["cells"]
    for index in (MONITOR, WATCHED):  # its live part emptied when it ended
        (out,) = [o for o in cells[index]["outputs"] if o.get("data")]
        assert WIDGET_VIEW not in out["data"] and "opd-chart-img" in "".join(out["data"]["text/html"])
    for index in (FORM, VIEWER, LIVE):
        assert any(WIDGET_VIEW in o.get("data", {}) for o in cells[index]["outputs"]), index
    state = nb["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    charts = [m["state"] for m in state.values() if "opdChart" in str(m["state"].get("_esm", ""))]
    assert len(charts) == 1, "only the live job's chart is saved (the ended monitors closed theirs)"
    bars = [m for m in state.values() if m["model_name"] == "FloatProgressModel"]
    assert len(bars) == 1, "only the live monitor's progress bar is saved"
    # an ended view's layout and style models were closed with its widgets: none is left unreferenced
    used = set(re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps([m["state"] for m in state.values()])))
    parts = {
        k
        for k, m in state.items()
        if m["model_name"] == "LayoutModel" or m["model_name"].endswith("StyleModel")
    }
    assert parts <= used, f"{len(parts - used)} layout/style models of closed widgets were saved"
    kept = sum(len(s["steps"]) for s in charts[0]["data"]["series"])
    assert kept >= held, f"the saved chart holds {kept} of the {held} points shown"
    assert lab.offsite_requests() == []
    lab.shut_down_kernels()
    _cancel(local_server, "e2e-live")
    saved.update(nb=nb, held=held)


def _cancel(local_server, name: str) -> None:  # noqa: ANN001
    """The job left running for the save: cancelled, so it holds no worker for other tests."""
    from pydantic import SecretStr

    from opd_nb.client import JobClient, Target

    client = JobClient(Target(kind="local", base_url=local_server.api_base, api_key=SecretStr("local")))
    stop_jobs(client, where=lambda job: (job.job_name or "").startswith(name))


def _need(saved: dict) -> dict:
    if "nb" not in saved:
        pytest.fail("test_notebook_monitor_in_chromium did not get to save the notebook")
    return saved


def _reopened_checks(lab: Lab, shot: str) -> None:
    """The saved notebook as it reopens: the finished monitors' snapshots, the live views restored."""
    from selenium.webdriver.common.by import By

    frame = _snapshot_chart(lab, MONITOR)
    _no_widget_errors(lab)
    snap = _in_output(lab, MONITOR, ".opd-monitor-snap")[0]
    table = next(t for t in snap.find_elements(By.CSS_SELECTOR, "table") if "checkpoint" in t.text)
    rows = [r for r in table.find_elements(By.CSS_SELECTOR, "tbody tr") if "checkpoint-" in r.text]
    assert table.is_displayed() and rows and any("best" in r.text for r in rows), table.text
    tip, legend, spare = hover_frame(lab, frame, ARTIFACTS / f"{shot}_hover.png")
    assert "step" in tip and JOB_NAME in legend, (tip, legend)
    assert abs(spare) <= 8, f"the frame is {spare:+.0f} px off its page's height"
    _snapshot_chart(lab, WATCHED)
    lab.driver.execute_script("arguments[0].scrollIntoView()", _outputs(lab, MONITOR))
    time.sleep(0.5)
    lab.driver.save_screenshot(str(ARTIFACTS / f"{shot}.png"))


def test_reopened_notebook_shows_snapshots_and_saved_widgets(lab: Lab, saved: dict) -> None:
    """Next day: the kernel was shut down; the page reloads (JupyterLab starts a fresh kernel)."""
    held = _need(saved)["held"]
    lab.open("lab/tree/e2e.ipynb")
    _reopened_checks(lab, "reopened_lab")
    # still live when saved: back from the saved widget state, its chart with every point it showed
    live = lab.wait_for(
        lambda: _in_output(lab, LIVE, ".opd-job-monitor .opd-chart"), 30, "the restored live chart"
    )
    assert int(live[0].get_attribute("data-points") or 0) >= held
    assert _in_output(lab, FORM, ".opd-config-form") and _in_output(lab, VIEWER, ".opd-rollout-viewer")
    assert lab.offsite_requests() == []


def test_reopened_notebook_in_notebook7(lab: Lab, saved: dict) -> None:
    _need(saved)
    lab.open("notebooks/e2e.ipynb", kernel=False)
    _reopened_checks(lab, "reopened_notebook7")
    assert lab.offsite_requests() == []


def test_untrusted_copy_keeps_static_curves_and_trust_makes_them_interactive(lab: Lab, saved: dict) -> None:
    """A committed notebook opened from a clone is untrusted: JupyterLab's sanitizer drops scripts and
    frames. Every monitor's curves stay visible as a picture, with the line on how to get the chart."""
    nb = json.loads(json.dumps(_need(saved)["nb"]))
    nb["metadata"]["opd_committed_copy"] = True  # another file's content: no signature vouches for it
    (lab.root / "committed.ipynb").write_text(json.dumps(nb, indent=1))
    lab.open("lab/tree/committed.ipynb")
    _no_widget_errors(lab, settle=2)
    assert not lab.css("iframe.opd-chart-frame") and not lab.css(
        ".opd-chart"
    )  # stripped: nothing interactive
    for index in (MONITOR, WATCHED):  # every monitor whose job ended (as in a committed tutorial)
        pictures = _in_output(lab, index, "img.opd-chart-img")
        assert pictures and pictures[0].is_displayed(), f"cell {index} shows no curves"
        assert lab.driver.execute_script("return arguments[0].naturalWidth", pictures[0]) > 100
        assert "trust the notebook" in _outputs(lab, index).text
    # saved while live: its snapshot part, saying as of when (a widget view is not shown untrusted)
    # (its snapshot part is refreshed at most every 10 s: saved early, it may still say "as of running")
    assert _in_output(lab, LIVE, ".opd-monitor-snap")
    assert re.search(r"as of (step \d+|running|queued)", _outputs(lab, LIVE).text)
    lab.driver.execute_script("arguments[0].scrollIntoView()", _outputs(lab, MONITOR))
    time.sleep(0.5)
    lab.driver.save_screenshot(str(ARTIFACTS / "untrusted_static_curves.png"))

    # Trusted (Command Palette > Trust Notebook, as the line says): the charts come back.
    _cell(lab, 1).click()
    lab.trust_notebook()
    frame = _snapshot_chart(lab, MONITOR)
    tip, _, _ = hover_frame(lab, frame, ARTIFACTS / "trusted_again_hover.png")
    assert "step" in tip
    assert not any(i.is_displayed() for i in _in_output(lab, MONITOR, "img.opd-chart-img"))
    assert lab.offsite_requests() == []
