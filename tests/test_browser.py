"""End to end in a real browser: JupyterLab (headless) + Chromium driven by Selenium.

A notebook loads the extension, targets a local control plane, shows the config form and the
reward playground, and submits a job with `%opd submit`: the job monitor must render, its chart
must gain points while the job runs, and the job must reach SUCCEEDED; hovering a curve shows a
tooltip with its step and value, and the smoothing slider redraws the line. Then `%opd rollouts`
opens the rollout viewer on it; picking a sample shows its completion with shaded tokens.
Screenshots of the form, the playground, the monitor, the chart and the viewer are saved under
tests/artifacts/. Chromium resolves no host but 127.0.0.1, and the test checks that the page loaded
nothing from anywhere else: everything the widgets draw comes from installed packages.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_driver import HAVE_CHROMIUM, NO_CHROMIUM, chromium

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"


PROBE = "widgets ready"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook(workspace: str, api_base: str) -> dict:
    cells = [
        f"import ipywidgets\nipywidgets.Label({PROBE!r})",  # the widget manager is listening (see _probe)
        "%load_ext opd_nb",
        f"%opd use local --base-url {api_base}",
        f"%opd form {workspace}",
        f"pg = %opd playground {workspace}\n"
        "pg.score('<think>n</think>' + pg.samples[0]['rollout_extra']['solution'])\npg",
        f"monitor = %opd submit {workspace}\nmonitor",
        "monitor.wait(timeout_s=400)\n"
        "viewer = %opd rollouts {monitor.job_ids[0]} --kind validation --sort ratio_asc\nviewer",
    ]
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c}
            for c in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _write_settings(settings: Path) -> None:
    """No virtual scrolling (all cells in the DOM), no news/update pop-ups, and the notebook's own
    kernel without a "Select Kernel" dialog: on a loaded machine that dialog came up after the test had
    stopped looking for it and blocked Run All (the config form then timed out; failure.png showed it)."""
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(json.dumps({"windowingMode": "none", "autoStartDefaultKernel": True}))
    notif = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notif.parent.mkdir(parents=True, exist_ok=True)
    notif.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))


@pytest.mark.skipif(not HAVE_CHROMIUM, reason=NO_CHROMIUM)
def test_notebook_monitor_in_chromium(tmp_path: Path, local_server) -> None:
    from conftest import tiny_workspace
    from selenium.webdriver.common.by import By

    ARTIFACTS.mkdir(exist_ok=True)
    root = tmp_path / "nb"
    root.mkdir()
    # 80 steps: forked from the warm fork server a tiny step takes 40-80 ms, and 8 steps once ended
    # within one of the monitor's 2 s polls, so the chart could not be seen growing.
    tiny_workspace("reward", root / "sorter", train_rows=16, n_epochs=40, eval_steps=8, save_steps=16)
    server = local_server  # the session's control plane: the kernel in JupyterLab submits to it
    (root / "e2e.ipynb").write_text(json.dumps(_notebook("sorter", server.api_base)))
    settings = tmp_path / "lab-settings"
    _write_settings(settings)
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    env.update(
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "jcfg"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "jrt"),
        DASHSCOPE_API_KEY="local",
    )
    lab_log = open(tmp_path / "lab.log", "wb")
    lab = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.open_browser=False",
            "--allow-root",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        cwd=root,
        env=env,
        stdout=lab_log,
        stderr=subprocess.STDOUT,
    )
    driver = None
    try:
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if (
                    httpx.get(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=1).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            assert lab.poll() is None, (tmp_path / "lab.log").read_text()[-2000:]
            time.sleep(0.3)
        driver = chromium(
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chrome'}",
            window="1400,2400",
        )
        driver.set_page_load_timeout(60)
        driver.get(f"http://127.0.0.1:{port}/lab/tree/e2e.ipynb?token={token}")

        def wait_for(fn, timeout: float, what: str):
            end = time.monotonic() + timeout
            last = None
            while time.monotonic() < end:
                try:
                    last = fn()
                    if last:
                        return last
                except Exception as exc:  # element not there yet / went stale
                    last = exc
                time.sleep(0.25)
            driver.save_screenshot(str(ARTIFACTS / "failure.png"))
            raise AssertionError(f"timed out waiting for {what} (last: {last!r})")

        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell"), 60, "the notebook")
        wait_for(
            lambda: driver.find_elements(
                By.CSS_SELECTOR, ".jp-Notebook-ExecutionIndicator[data-status='idle']"
            ),
            90,
            "an idle kernel",
        )
        # JupyterLab may ask which kernel to start: accept the notebook's own (python3).
        end = time.monotonic() + 15
        while time.monotonic() < end:
            buttons = driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept")
            if buttons:
                buttons[0].click()
                break
            if driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook-ExecutionIndicator[data-status='idle']"):
                time.sleep(1.0)
                if not driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog"):
                    break
            time.sleep(0.25)
        wait_for(
            lambda: driver.find_elements(
                By.CSS_SELECTOR, ".jp-Notebook-ExecutionIndicator[data-status='idle']"
            ),
            90,
            "an idle kernel",
        )
        _probe_widgets(driver, wait_for)

        def run_all() -> None:
            """Run > Run All Cells, through the menus as a user would."""
            wait_for(
                lambda: driver.find_element(
                    By.XPATH, "//div[contains(@class,'lm-MenuBar-itemLabel') and text()='Run']"
                ),
                30,
                "the Run menu",
            ).click()
            wait_for(
                lambda: driver.find_element(
                    By.XPATH, "//div[contains(@class,'lm-Menu-itemLabel') and text()='Run All Cells']"
                ),
                10,
                "Run All Cells",
            ).click()

        def first_opd_cell_ran() -> bool:
            prompts = driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .jp-InputPrompt")
            return prompts[1].text.strip() not in ("", "[ ]:")  # [0] is the probe, already run

        # On a loaded machine the kernel could still be connecting when the indicator first said idle,
        # and then Run All passes over the cells without running one (failure.png: every prompt
        # "[ ]:"). Nothing ran, so running them all again is safe.
        for _ in range(3):
            run_all()
            end = time.monotonic() + 20
            while time.monotonic() < end and not first_opd_cell_ran():
                time.sleep(0.5)
            if first_opd_cell_ran():
                break
        wait_for(first_opd_cell_ran, 10, "the first %opd cell to run")

        form = wait_for(
            lambda: driver.find_element(By.CSS_SELECTOR, ".opd-config-form"), 90, "the config form"
        )
        assert "learning_rate" in form.text
        playground = wait_for(
            lambda: driver.find_element(By.CSS_SELECTOR, ".opd-reward-playground"),
            60,
            "the reward playground",
        )
        driver.execute_script("arguments[0].scrollIntoView()", form)
        form.screenshot(str(ARTIFACTS / "config_form.png"))
        driver.execute_script("arguments[0].scrollIntoView()", playground)
        playground.screenshot(str(ARTIFACTS / "reward_playground.png"))

        def monitor_or_error():
            errors = [
                e.text
                for e in driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")
                if "UsageError" in e.text or "Traceback" in e.text
            ]
            if errors:
                driver.save_screenshot(str(ARTIFACTS / "failure.png"))
                pytest.fail("a cell failed: " + errors[0][:1000])
            return driver.find_element(By.CSS_SELECTOR, ".opd-job-monitor")

        wait_for(monitor_or_error, 180, "the job monitor")

        points_seen: list[int] = []

        def finished() -> bool:
            m = driver.find_element(By.CSS_SELECTOR, ".opd-job-monitor")
            for chart in m.find_elements(By.CSS_SELECTOR, ".opd-chart"):
                if (held := chart.get_attribute("data-points")) and "SUCCEEDED" not in m.text:
                    points_seen.append(int(held))
            return "SUCCEEDED" in m.text

        wait_for(finished, 240, "the job to reach SUCCEEDED in the monitor")
        # The job's end re-renders the monitor (its static snapshot replaces the output through its
        # display id), so an element found before that goes stale: each use finds it again.
        time.sleep(1.0)
        wait_for(finished, 30, "the monitor after its final render")
        monitor_text = wait_for(
            lambda: _screenshot(driver, ".opd-job-monitor", ARTIFACTS / "job_monitor.png"),
            30,
            "a screenshot of the monitor",
        )
        grew = sorted(set(points_seen))
        assert len(grew) >= 2 and points_seen == sorted(points_seen), f"the chart never grew: {points_seen}"
        assert "SUCCEEDED" in monitor_text
        assert "%opd rollouts" in monitor_text  # the samples panel says how to open the viewer
        _hover_and_smooth(driver, wait_for, ".opd-job-monitor .opd-chart", ARTIFACTS / "chart_live")

        # The rollout viewer on the finished job: pick a sample, see its shaded tokens, save a screenshot.
        viewer = wait_for(
            lambda: driver.find_element(By.CSS_SELECTOR, ".opd-rollout-viewer"), 120, "the rollout viewer"
        )
        assert "rollouts of" in viewer.text and "validation" in viewer.text
        options = viewer.find_elements(By.CSS_SELECTOR, "select option")
        assert len(options) >= 2, viewer.text
        before = viewer.find_element(By.CSS_SELECTOR, ".opd-completion").get_attribute("innerHTML")
        options[1].click()
        wait_for(
            lambda: (
                viewer.find_element(By.CSS_SELECTOR, ".opd-completion").get_attribute("innerHTML") != before
            ),
            30,
            "the selected sample to change",
        )
        tokens = viewer.find_elements(By.CSS_SELECTOR, ".opd-completion .opd-tok")
        assert tokens and "teacher log p" in (tokens[0].get_attribute("title") or "")
        driver.execute_script("arguments[0].scrollIntoView()", viewer)
        time.sleep(0.5)
        viewer.screenshot(str(ARTIFACTS / "rollout_viewer.png"))
        elsewhere = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
            ".filter(u => !/^(http:\\/\\/127\\.0\\.0\\.1[:/]|data:|blob:)/.test(u))"
        )
        assert elsewhere == [], f"the page fetched from elsewhere: {elsewhere[:5]}"
    finally:
        if driver is not None:
            driver.quit()
        lab.terminate()
        try:
            lab.wait(15)
        except subprocess.TimeoutExpired:
            lab.kill()
        lab_log.close()


def _hover_and_smooth(driver, wait_for, selector: str, shots: Path) -> None:  # noqa: ANN001
    """Hover the middle of the chart's first panel: a tooltip names a step and a value. Then move the
    smoothing slider from 0 to 0.95: the smoothed line's path changes (at 0 it is the raw one)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    def chart():  # found again on every use: a final render may replace it
        return driver.find_element(By.CSS_SELECTOR, selector)

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart())
    time.sleep(0.5)

    def hovered() -> str:
        panel = chart().find_element(By.CSS_SELECTOR, "svg.opd-panel")
        ActionChains(driver).move_to_element_with_offset(panel, 10, 0).perform()
        tip = chart().find_element(By.CSS_SELECTOR, ".opd-tip")
        text = tip.text if tip.is_displayed() else ""
        return text if "step" in text and any(c.isdigit() for c in text) else ""

    tip = wait_for(hovered, 30, "a tooltip on hover")
    chart().screenshot(str(shots.with_name(shots.name + "_hover.png")))
    assert "step" in tip, tip

    def slide(value: float) -> None:
        driver.execute_script(
            "const s = arguments[0]; s.value = arguments[1];"
            "s.dispatchEvent(new Event('input', {bubbles: true}));",
            chart().find_element(By.CSS_SELECTOR, "input.opd-smoothing"),
            value,
        )

    def line_d() -> str:
        return chart().find_element(By.CSS_SELECTOR, "path.opd-line").get_attribute("d") or ""

    slide(0)
    raw = chart().find_element(By.CSS_SELECTOR, "path.opd-raw").get_attribute("d")
    wait_for(lambda: line_d() == raw, 10, "the smoothed line to equal the raw one at 0")
    slide(0.95)
    wait_for(lambda: line_d() not in ("", raw), 10, "the smoothing slider to redraw the line")
    chart().screenshot(str(shots.with_name(shots.name + "_smoothed.png")))


def _screenshot(driver, selector: str, path: Path) -> str:  # noqa: ANN001
    """Scroll to the element, save its screenshot and return its text, all on one lookup (a stale
    element raises, and the caller's ``wait_for`` looks it up again)."""
    from selenium.webdriver.common.by import By

    element = driver.find_element(By.CSS_SELECTOR, selector)
    driver.execute_script("arguments[0].scrollIntoView()", element)
    time.sleep(0.5)
    element.screenshot(str(path))
    return element.text


def _probe_widgets(driver, wait_for) -> None:
    """Run the probe cell alone until its widget renders, before any job is submitted.

    Once, on a loaded machine, every widget of the run said "Error displaying widget: model not
    found" (failure.png): the kernel's widget messages reached a page whose widget manager was not
    listening yet, and the page never gets them again. A reload builds a new manager, which asks the
    kernel for its live widgets; the probe shows whether it listens before Run All submits anything."""
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def probe_state() -> str | None:
        cell = driver.find_element(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell")
        text = " ".join(o.text for o in cell.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output"))
        return "broken" if "Error displaying widget" in text else "ok" if PROBE in text else None

    def probe_ran() -> bool:
        """The prompt says ``[*]`` or ``[1]``: the kernel took the cell (a keystroke can be lost)."""
        text = driver.find_element(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .jp-InputPrompt").text
        return "*" in text or any(ch.isdigit() for ch in text)

    def settle(fn, timeout: float):  # noqa: ANN001, ANN202
        """``wait_for`` without the failure: the probe decides what a miss means."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with contextlib.suppress(Exception):  # not rendered yet / went stale
                if found := fn():
                    return found
            time.sleep(0.25)
        return None

    for attempt in range(4):
        prompt = wait_for(
            lambda: driver.find_element(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .jp-InputPrompt"),
            30,
            "a cell",
        )
        prompt.click()
        ActionChains(driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
        if not settle(probe_ran, 20):
            continue  # the keystroke went nowhere: press it again
        # On a loaded CI machine (pytest at 2,100 s) the first import of ipywidgets took over 60 s.
        state = settle(probe_state, 180)
        if state == "ok":
            return
        driver.save_screenshot(str(ARTIFACTS / f"probe_{state or 'silent'}_{attempt}.png"))
        driver.refresh()
        try:
            driver.switch_to.alert.accept()  # "leave the page?" for the unsaved probe output
        except NoAlertPresentException:
            pass
        wait_for(
            lambda: driver.find_elements(
                By.CSS_SELECTOR, ".jp-Notebook-ExecutionIndicator[data-status='idle']"
            ),
            90,
            "an idle kernel after the reload",
        )
    pytest.fail("the probe widget never rendered: the page's widget manager did not hear the kernel")
